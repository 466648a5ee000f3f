#!/usr/bin/env python3
"""What the prune after a history rewrite costs: `git gc --prune=now` (agent.vault.prune
now) against the repack and prune it replaced, as a ratio measured in one run.

    python scripts/bench_prune.py [--commits 2000] [--rounds 5]

Builds a repository of N commits (one file growing, one file per commit), rewrites the
newest half away (so objects are unreachable, as after `agent forget`), then, on copies
of it, alternates the two ways of pruning and prints each one's median and the ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.vault import prune  # noqa: E402


def git(where: Path, *args: str, input: str | None = None) -> str:
    return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True,
                          check=True, input=input).stdout


def build(root: Path, commits: int) -> None:
    git(root, "init", "-q", "-b", "main")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}
    lines: list[str] = []
    stream = []
    for i in range(commits):
        lines.append(f"- fact {i} " + "x" * 60)
        memory = "\n".join(lines) + "\n"
        note = f"note {i}\n"
        stream.append(f"commit refs/heads/main\ncommitter b <b@x> {1700000000 + i} +0000\n"
                      f"data {len(str(i)) + 1}\nc{i}\n"
                      f"M 100644 inline MEMORY.md\ndata {len(memory.encode())}\n{memory}\n"
                      f"M 100644 inline notes/{i}.md\ndata {len(note)}\n{note}\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=root, input="".join(stream),
                   text=True, check=True, env=env)
    git(root, "reset", "-q", "--hard", "main")
    git(root, "reset", "-q", "--hard", f"main~{commits // 2}")   # half unreachable


def old_way(root: Path) -> None:
    git_dir = root / ".git"
    prune.git_in(root, "reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all")
    prune.drop_derived(git_dir)
    prune.git_in(root, "repack", "-a", "-d", "-q")
    prune.git_in(root, "prune", "--expire=now")


def new_way(root: Path) -> None:
    prune.prune_repository(root, root / ".git")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        build(base, args.commits)
        times: dict[str, list[float]] = {"repack+prune": [], "gc --prune=now": []}
        ways = {"repack+prune": old_way, "gc --prune=now": new_way}
        for r in range(args.rounds):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for name in order:
                copy = Path(tmp) / f"{name.split()[0]}-{r}"
                shutil.copytree(base, copy, symlinks=True)
                t = time.perf_counter()
                ways[name](copy)
                times[name].append(time.perf_counter() - t)
                left = git(copy, "count-objects", "-v")
                assert "count: 0" in left, left
                shutil.rmtree(copy)
        med = {k: statistics.median(v) for k, v in times.items()}
        for k, v in med.items():
            print(f"{k:16} median {v * 1000:7.0f} ms over {args.rounds} rounds")
        print(f"ratio gc / repack+prune: {med['gc --prune=now'] / med['repack+prune']:.2f}")


if __name__ == "__main__":
    main()
