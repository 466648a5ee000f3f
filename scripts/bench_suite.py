#!/usr/bin/env python3
"""The test suite's wall time and CPU at two commits, run one after the other on this
machine, so both meet the same machine (issue 34: "CI's wall time at most half of
today's on the same machine").

Each commit is checked out into a temporary worktree and its suite run with this
Python (the project's venv) and that worktree first on PYTHONPATH, with the pytest
arguments given for it: by default the baseline as CI ran it then (serial, 952 tests
at f0255c9) and the current tree as the README runs it now (`-n auto`). Printed for
each run: wall-clock seconds, the CPU seconds of the runner and every process it
waited for (user + system), the tests passed; then the ratio of each pair and the
medians over --rounds.

    python scripts/bench_suite.py [--before f0255c9] [--after HEAD] [--rounds 1]
        [--before-args "-p no:xdist"] [--after-args "-n auto"]

One round of the default pair takes about 20 minutes on 2 cores. Run it on a machine
doing nothing else: a second suite running beside it changes both figures.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent


def worktree(ref: str, where: Path) -> Path:
    path = where / ref.replace("/", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), ref],
                   check=True)
    return path


def run_suite(tree: Path, args: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the run and its children, pytest's summary line)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfE", *args],
                          cwd=tree, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = proc.stdout.splitlines()
    lines = [l for l in out if re.search(r"\d+ (passed|failed)", l)]
    summary = lines[-1].strip("= ") if lines else f"exit {proc.returncode}"
    failed = [l for l in out if l.startswith(("FAILED", "ERROR"))]
    if proc.returncode:         # a run that failed is not a figure: say what failed
        summary += "".join(f"\n    {l}" for l in failed or out[-20:])
    return wall, cpu, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="f0255c9", help="the baseline commit (default f0255c9)")
    ap.add_argument("--after", default="HEAD", help="the commit to compare (default HEAD)")
    ap.add_argument("--before-args", default="-p no:xdist",
                    help="pytest arguments for the baseline (default: serial, as CI ran it)")
    ap.add_argument("--after-args", default="-n auto",
                    help="pytest arguments for the compared commit (default: the README's)")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-suite-") as tmp:
        trees = {}
        try:
            trees = {"before": worktree(a.before, Path(tmp)), "after": worktree(a.after, Path(tmp))}
            walls: list[float] = []
            cpus: list[float] = []
            print(f"{os.cpu_count()} cores; before = {a.before} ({a.before_args}), "
                  f"after = {a.after} ({a.after_args})", flush=True)
            for r in range(1, a.rounds + 1):
                got = {}
                for name, args in (("before", a.before_args), ("after", a.after_args)):
                    got[name] = run_suite(trees[name], shlex.split(args))
                    wall, cpu, summary = got[name]
                    print(f"round {r} {name:6}: wall {wall:6.0f} s, CPU {cpu:6.0f} s, {summary}",
                          flush=True)
                walls.append(got["after"][0] / got["before"][0])
                cpus.append(got["after"][1] / got["before"][1])
                print(f"round {r} ratio : wall {walls[-1]:.2f}, CPU {cpus[-1]:.2f}", flush=True)
            print(f"median of {a.rounds}: wall {statistics.median(walls):.2f}, "
                  f"CPU {statistics.median(cpus):.2f}")
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                               check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
