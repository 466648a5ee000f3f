#!/usr/bin/env python3
"""Reading history on a big vault: the git binary (agent.vault.history) against GitPython.

Builds a vault of about 100,000 messages (as scripts/bench_vault.py does) and gives it a
history of `--commits` agent turns (every 10th also adds a fact to MEMORY.md), then
times, median of `--runs`:

- undo's search: the newest agent commit not yet undone, among the last 1,000 commits
  with their trailers (`history.recent` + `history.undoable`, one `git log`), against
  GitPython's object model (`Repo.iter_commits`, author, summary, message trailers);
- `agent log -n 20`: how MEMORY.md and USER.md changed, with diffs (`history.file_log`,
  one `git log -p`), against GitPython (`iter_commits(paths=...)` + `Commit.diff`);
- importing GitPython at all (a command pays it before it reads anything).

GitPython is not a dependency of the product: `pip install -e '.[bench]'` to run this.

    python scripts/bench_history.py [--messages 100000] [--commits 2000] [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_vault import build  # noqa: E402

from agent.vault import history  # noqa: E402
from agent.vault.change import Change  # noqa: E402

PATHS = ["MEMORY.md", "USER.md"]


def add_history(vault, commits: int) -> None:
    """`commits` agent turns through git fast-import (fast, and the same objects)."""
    ident = vault.agent_identity()
    session_rel = "sessions/cli/bench/2099-01.jsonl"
    memory = (vault.root / "MEMORY.md").read_text(encoding="utf-8")
    session = ""
    stream = []
    t0 = 4_000_000_000
    for i in range(commits):
        session += json.dumps({"id": f"b{i}", "role": "user", "content": f"turn {i}"}) + "\n"
        files = {session_rel: session}
        if i % 10 == 0:
            memory += f"- fact number {i} about plan {i % 31}\n"
            files["MEMORY.md"] = memory
        msg = Change("chat", f"turn {i} about topic {i % 97}", scope="cli/bench",
                     trailers={"Session": "cli/bench", "Turn": str(i + 1), "Model": "m",
                               "Tokens": "1 in, 1 out, 0 cache read, 0 cache write"}).message()
        data = msg.encode()
        stream.append(f"commit refs/heads/main\n"
                      f"author {ident.name} <{ident.email}> {t0 + i} +0000\n"
                      f"committer {ident.name} <{ident.email}> {t0 + i} +0000\n"
                      f"data {len(data)}\n".encode() + data + b"\n")
        if i == 0:
            stream.append(b"from refs/heads/main^0\n")
        for rel, text in files.items():
            blob = text.encode()
            stream.append(f"M 100644 inline {rel}\ndata {len(blob)}\n".encode() + blob + b"\n")
        stream.append(b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=vault.root, input=b"".join(stream),
                   check=True)
    subprocess.run(["git", "reset", "-q", "--hard"], cwd=vault.root, check=True)
    subprocess.run(["git", "gc", "-q"], cwd=vault.root, check=True)


def timed(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def undo_search_git(vault, limit):
    c = history.undoable(history.recent(vault, limit), vault.agent_identity().email)
    return c.sha


def undo_search_gitpython(repo, email, limit):
    commits = []
    for c in repo.iter_commits("HEAD", max_count=limit):
        trailers = {}
        for line in c.message.rstrip("\n").rsplit("\n\n", 1)[-1].splitlines():
            key, sep, value = line.partition(": ")
            if sep:
                trailers.setdefault(key, []).append(value.strip())
        commits.append(history.Commit(c.hexsha, c.author.email, c.summary,
                                      {k: tuple(v) for k, v in trailers.items()}))
    return history.undoable(commits, email).sha


def log_git(vault):
    return history.file_log(vault, PATHS, max_count=20)


def log_gitpython(repo):
    out = []
    for c in repo.iter_commits("HEAD", paths=PATHS, max_count=20):
        out.append(f"commit {c.hexsha[:7]}  {c.authored_datetime:%Y-%m-%d %H:%M}  {c.author.name}"
                   f"\n\n    {c.summary}\n")
        parent = c.parents[0] if c.parents else None
        for d in (parent.diff(c, paths=PATHS, create_patch=True) if parent else []):
            out.append(d.diff.decode("utf-8", "replace"))
    return "\n".join(out)


def import_ms(runs: int) -> float:
    def once(code):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return (time.perf_counter() - t) * 1000
    base = statistics.median(once("pass") for _ in range(runs))
    return statistics.median(once("import git") for _ in range(runs)) - base


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    import git  # GitPython: only this comparison needs it

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        vault = build(Path(tmp) / "v", args.messages)
        add_history(vault, args.commits)
        print(f"built {args.messages} messages, {args.commits} turn commits in "
              f"{time.perf_counter() - t:.1f}s", file=sys.stderr)
        email = vault.agent_identity().email
        rows = []
        a, sha_a = timed(lambda: undo_search_git(vault, history.UNDO_DEPTH), args.runs)
        b, sha_b = timed(lambda: undo_search_gitpython(git.Repo(vault.root), email,
                                                       history.UNDO_DEPTH), args.runs)
        assert sha_a == sha_b, (sha_a, sha_b)
        rows.append(("undo: find the last agent commit (1,000 read)", a, b))
        a, _ = timed(lambda: undo_search_git(vault, history.UNDO_FIRST), args.runs)
        b, _ = timed(lambda: undo_search_gitpython(git.Repo(vault.root), email,
                                                   history.UNDO_FIRST), args.runs)
        rows.append((f"undo: the same, {history.UNDO_FIRST} read (found there)", a, b))
        a, _ = timed(lambda: log_git(vault), args.runs)
        b, _ = timed(lambda: log_gitpython(git.Repo(vault.root)), args.runs)
        rows.append(("agent log -n 20 MEMORY.md USER.md (diffs)", a, b))
        rows.append(("import git (GitPython), once per process", 0.0, import_ms(args.runs)))
    print(f"{'path':<48} {'git binary':>11} {'GitPython':>10}")
    for name, a, b in rows:
        print(f"{name:<48} {a:>8.1f} ms {b:>7.1f} ms")
    print(json.dumps({name: {"git_ms": round(a, 1), "gitpython_ms": round(b, 1)}
                      for name, a, b in rows}))


if __name__ == "__main__":
    main()
