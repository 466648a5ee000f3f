#!/usr/bin/env python3
"""How long `agent --help`, `agent note x` and `agent status` take from a cold process,
with this checkout's code and with another's (`--before`: a checkout or `git archive` of
the code to compare with), taken in turns in one run so the machine's load falls on both
alike. Prints each command's median and the ratio after / before (under 1: faster).

    git archive main | tar -x -C /tmp/before
    python scripts/bench_startup.py --before /tmp/before --rounds 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).absolute().parent.parent
COMMANDS = {"--help": ["--help"], "note x": ["note", "x"], "status": ["status"]}


def timed(code: Path, vault: Path, args: list[str], env: dict) -> float:
    env = {**env, "PYTHONPATH": str(code)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault), *args],
                       env=env, capture_output=True, stdin=subprocess.DEVNULL, cwd=code)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{code}: agent {' '.join(args)} failed:\n{p.stderr.decode()}")
    return took


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="the code to compare with")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agent-startup-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        env = {**os.environ, "HOME": str(home), "AGENT_EMBED": "off",
               "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
               "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}
        codes = {"before": args.before.absolute(), "after": HERE}
        vaults = {}
        for name, code in codes.items():
            vaults[name] = Path(tmp) / name
            subprocess.run([sys.executable, "-m", "agent", "--vault", str(vaults[name]), "init"],
                           env={**env, "PYTHONPATH": str(code)}, capture_output=True, check=True)
        times = {(n, c): [] for n in codes for c in COMMANDS}
        for _ in range(args.rounds):
            for cmd, cargs in COMMANDS.items():
                for name in codes:            # in turns: the load falls on both alike
                    times[name, cmd].append(timed(codes[name], vaults[name], cargs, env))
    print(f"{'command':<10}{'before ms':>11}{'after ms':>10}{'ratio':>8}   ({args.rounds} rounds, medians)")
    worst = 0.0
    for cmd in COMMANDS:
        b = statistics.median(times["before", cmd]) * 1000
        a = statistics.median(times["after", cmd]) * 1000
        worst = max(worst, a / b)
        print(f"{cmd:<10}{b:>11.0f}{a:>10.0f}{a / b:>8.2f}")
    print(f"slowest ratio: {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
