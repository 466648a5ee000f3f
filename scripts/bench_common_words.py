#!/usr/bin/env python3
"""A word that every message holds, at 1,000 to 1,000,000 messages (issue 36): `agent
search`, the search inside one process, and a chat turn's CPU, each as a ratio to the
smallest vault, measured in one run.

Vaults are built as scripts/bench_million.py builds them (one imported session whose
every message holds "garden" and "trip", 1,000 archive entries), once, under --keep.

    python scripts/bench_common_words.py [--sizes 1000,100000,1000000] [--runs 7] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import bench_million  # noqa: E402
from fakeanthropic import FakeAnthropic  # noqa: E402

QUERY = "garden trip"
# AGENT_BENCH_CODE: another checkout whose code runs the commands (a before/after pair).
CODE = os.environ.get("AGENT_BENCH_CODE") or str(ROOT)
ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_COMMITTER_NAME": "bench",
       "GIT_AUTHOR_EMAIL": "bench@localhost", "GIT_COMMITTER_EMAIL": "bench@localhost",
       "AGENT_EMBED": "off", "PYTHONPATH": CODE}


def vault_of(keep: Path, n: int) -> Path:
    root = keep / f"v{n}"
    if not (root / ".agent" / "index.sqlite").exists():
        os.environ.update(ENV)
        bench_million.build(root, n)
        subprocess.run([sys.executable, "-m", "agent", "--vault", str(root), "index", "rebuild"],
                       env={**os.environ, **ENV}, check=True, stdout=subprocess.DEVNULL)
    return root


def process(args: list[str], env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of one `agent` command in a new process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "agent", *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                   cwd=tempfile.gettempdir())     # the code on PYTHONPATH, not the cwd's
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def in_process(root: Path, runs: int) -> float:
    """Median CPU seconds of the search itself, inside one process (index up to date)."""
    code = ("import sys, time, statistics\n"
            "from agent.vault.repo import Vault\nfrom agent.search import index\n"
            f"v = Vault.open({str(root)!r}); index.search(v, {QUERY!r}, 10, mode='words')\n"
            "c = []\n"
            f"for _ in range({runs}):\n"
            "    p = time.process_time(); index.search(v, %r, 10, mode='words')\n"
            "    c.append(time.process_time() - p)\n"
            "print(statistics.median(c))\n") % QUERY
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **ENV}, check=True,
                         capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout
    return float(out.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "bench-common-words")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    roots = {n: vault_of(args.keep, n) for n in sizes}
    rows: dict[int, dict[str, float]] = {}
    with FakeAnthropic() as server:
        server.default_reply = lambda body: bench_million.model(body)
        env = {**os.environ, **ENV, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "bench"}
        samples: dict[int, dict[str, list[float]]] = {n: {} for n in sizes}
        for _ in range(args.runs):          # sizes interleaved: the machine's load hits each alike
            for n in sizes:
                va = ["--vault", str(roots[n])]
                s = samples[n]
                wall, cpu = process([*va, "search", "--mode", "words", QUERY], env)
                s.setdefault("search wall", []).append(wall)
                s.setdefault("search CPU", []).append(cpu)
                _, cpu = process([*va, "chat", "--session", "cli/bench", "-m",
                                  "what did we plan for the garden?"], env)
                s.setdefault("turn CPU", []).append(cpu)
        for n in sizes:
            rows[n] = {k: statistics.median(v) for k, v in samples[n].items()}
            rows[n]["search in-process CPU"] = in_process(roots[n], args.runs)
    base = rows[sizes[0]]
    print(f"'{QUERY}' (words in every message), medians of {args.runs} runs; ratio to {sizes[0]:,}:")
    for key in ("search wall", "search CPU", "search in-process CPU", "turn CPU"):
        cells = "  ".join(f"{n:>9,}: {rows[n][key] * 1000:7.1f} ms ({rows[n][key] / base[key]:.2f}x)"
                          for n in sizes)
        print(f"{key:<22} {cells}")


if __name__ == "__main__":
    main()
