"""Small hostile MCP servers for the tests, run as a process:

    python tests/mcp_hostile.py MODE MARKER

Each first appends `start <time.time()>` to MARKER (proof that it was started, and when).
MODE:
  serve    then behaves as tests/mcp_fixture.py (a real server: add, shout, ...);
  loud     writes 3 MB to stderr, then serves;
  garbage  prints lines that are not JSON-RPC, forever, and never answers;
  hang     never answers; when its stdin closes (the agent gave up on it) it appends
           `end <time.time()>` to MARKER and exits.
"""

import runpy
import sys
import time
from pathlib import Path

mode, marker = sys.argv[1], sys.argv[2]
with open(marker, "a") as f:
    f.write(f"start {time.time()}\n")

if mode == "loud":
    for _ in range(3 * 1024):
        sys.stderr.write("x" * 1023 + "\n")
    sys.stderr.flush()
    mode = "serve"
if mode == "serve":
    sys.argv = [str(Path(__file__).with_name("mcp_fixture.py"))]
    runpy.run_path(sys.argv[0], run_name="__main__")
elif mode == "garbage":
    n = 0
    while True:
        n += 1
        sys.stdout.write(f"garbage line {n} {{not json\n")
        sys.stdout.flush()
elif mode == "hang":
    for _ in sys.stdin:
        pass
    with open(marker, "a") as f:
        f.write(f"end {time.time()}\n")
