#!/usr/bin/env python3
"""How much one `agent note`-sized change costs as the vault grows.

Builds vaults holding about 1,000, 10,000 and 100,000 messages with the files that
implies (monthly session files, a daily note per day, an archive entry per ~25
messages), then measures:

- the in-process cost of one change (take the lock, check for hand edits, append a line,
  fsync, commit): median and 95th percentile;
- the wall time of whole `agent note`, `agent status` and `agent --help` processes:
  medians (the index is built first, as after any agent command).

Targets: median change at most 30 ms at every size and growing at most 1.5x from the
smallest vault to the largest; `agent note` and `agent --help` under 100 ms; `agent
status` flat (within 1.1x) across sizes.

`--compare DIR` also runs the processes of the checkout at DIR (e.g. an older commit
unpacked with `git archive`) on the same vaults, alternating with this one, so both
sets of figures come from the same run.

    python scripts/bench_vault.py [--sizes 1000,10000,100000] [--runs 40] [--compare DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# Words alone, as these figures were set; scripts/bench_search.py measures search by
# meaning (with the embed extra, `index rebuild` here would embed every message).
os.environ.setdefault("AGENT_EMBED", "off")

from agent.vault.change import Change  # noqa: E402
from agent.stores import memory  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402
from agent.ops.vaults import LAYOUT  # noqa: E402

PER_DAY = 50
SESSIONS = ["cli/default", "cli/work", "telegram/me"]


def build(root: Path, messages: int) -> Vault:
    vault, _ = Vault.init(root, LAYOUT)
    start = datetime(2021, 1, 1, 9, 0, tzinfo=timezone.utc)
    files: dict[str, list[str]] = {}
    for i in range(messages):
        day = i // PER_DAY
        ts = start + timedelta(days=day, minutes=(i % PER_DAY) * 5)
        key = SESSIONS[day % len(SESSIONS)]
        line = json.dumps({"id": f"m{i}", "ts": ts.isoformat(), "role": "user" if i % 2 == 0 else "assistant",
                           "content": f"message {i} about topic {i % 97} and plan {i % 31}",
                           "turn": i // 2 + 1})
        files.setdefault(f"sessions/{key}/{ts:%Y-%m}.jsonl", []).append(line)
        if i % PER_DAY == 0:
            files.setdefault(memory.daily_path(ts.date()), [f"# {ts:%Y-%m-%d}", ""]).append(
                f"- 09:00 note for day {day}")
        if i % 25 == 24:
            aid = i // 25 + 1
            files[f"archive/{ts:%Y}/{ts:%m}/{aid}.md"] = [
                "---", f"id: {aid}", f"session: {key}", f"created: '{ts.isoformat()}'",
                f"topic: topic {aid}", "importance: 0.5", "---", f"Summary of messages {i - 24}..{i}."]
    for rel, lines in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("\n".join(lines) + "\n")
    vault.git("add", "-A")
    vault.git("-c", "gc.auto=0", "commit", "-q", "-m", f"bench: {messages} messages", env={
        "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "b@x"})
    vault.git("gc", "-q")  # an old vault is packed; a gc running mid-measurement is noise
    return vault


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def agent_cmd(code: Path, vault: Vault, *args: str) -> tuple[list[str], dict]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    # As installed, Python caches the bytecode; with PYTHONDONTWRITEBYTECODE set (some
    # sandboxes set it) every process would recompile each module changed since the
    # last cache and time the compiler, not the command.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # Run in the vault's folder (see the callers): `-m` puts the current folder first on
    # sys.path, so from a checkout it would import that checkout whatever PYTHONPATH says.
    return [sys.executable, "-m", "agent", "--vault", str(vault.root), *args], env


def processes(vaults: dict[tuple[int, Path], Vault], runs: int) -> dict[tuple[int, Path], dict]:
    """Median wall time of `agent note`, `agent status` and `agent --help` per vault size
    and checkout, every size and checkout taking turns run by run (a machine whose speed
    drifts then shifts them all alike, and their ratios hold); and (keys ending in `_cpu`)
    the median CPU time of the process and the git commands it ran, which a busy machine
    inflates far less than wall time.

    Each checkout works on its own copy of the vault: their search indexes may differ
    in format, and one shared index would be rebuilt at every switch."""
    what_args = (("note", ("note", "process note {i}")), ("status", ("status",)),
                 ("help", ("--help",)))
    times: dict[tuple[int, Path], dict[str, list[float]]] = {
        key: {k: [] for w, _ in what_args for k in (w, w + "_cpu")} for key in vaults}
    for i in range(max(5, runs // 4)):
        for key, vault in vaults.items():
            for what, args in what_args:
                cmd, env = agent_cmd(key[1], vault, *(a.format(i=i) for a in args))
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=vault.root)
                times[key][what].append((time.perf_counter() - t) * 1000)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                times[key][what + "_cpu"].append(
                    (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
    return {key: {k: statistics.median(v) for k, v in t.items()} for key, t in times.items()}


def measure(vault: Vault, runs: int) -> list[float]:
    changes = []
    rel = "memory/2099-01-01.md"
    for i in range(runs):
        t = time.perf_counter()
        with vault.locked():
            vault.append_lines(rel, [f"- 10:00 bench line {i}"], header="# 2099-01-01\n\n")
            vault.commit(Change("note", f"add 1 line to {rel}"))
        changes.append((time.perf_counter() - t) * 1000)
    return changes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--compare", type=Path, metavar="DIR",
                    help="also time the processes of the checkout at DIR, on the same vaults")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent.parent
    codes = [here] + ([args.compare.resolve()] if args.compare else [])
    sizes = [int(s) for s in args.sizes.split(",")]
    os.environ.setdefault("GIT_AUTHOR_NAME", "bench")
    os.environ.setdefault("GIT_AUTHOR_EMAIL", "bench@localhost")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        vaults: dict[tuple[int, Path], Vault] = {}
        for n in sizes:
            t = time.perf_counter()
            vault = build(Path(tmp) / f"v{n}", n)
            build_s = time.perf_counter() - t
            files = int(vault.git("ls-files").count("\n"))
            changes = measure(vault, args.runs)
            vaults[(n, here)] = vault
            for i, code in enumerate(codes[1:]):
                copy = Path(tmp) / f"v{n}-compare{i}"
                shutil.copytree(vault.root, copy, symlinks=True)
                vaults[(n, code)] = Vault.open(copy, LAYOUT)
            rows.append([n, files, build_s, statistics.median(changes), pct(changes, 0.95)])
            print(f"built {n} messages ({files} files) in {build_s:.1f}s", file=sys.stderr)
        for (_n, code), v in vaults.items():
            # As after any agent command: the index is up to date.
            cmd, env = agent_cmd(code, v, "index", "rebuild")
            subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=v.root)
        procs = processes(vaults, args.runs)
        for row in rows:
            row.append({code: procs[(row[0], code)] for code in codes})
    print(f"{'messages':>9} {'files':>6} {'change median':>14} {'change p95':>11} "
          f"{'agent note':>11} {'status':>9} {'--help':>9}   (CPU: note, status, --help)")
    for n, files, _, med, p95, procs in rows:
        for code in codes:
            p = procs[code]
            label = "" if code == here else f"  ({code})"
            print(f"{n:>9} {files:>6} {med:>11.1f} ms {p95:>8.1f} ms {p['note']:>8.1f} ms "
                  f"{p['status']:>6.1f} ms {p['help']:>6.1f} ms   ({p['note_cpu']:.0f}, "
                  f"{p['status_cpu']:.0f}, {p['help_cpu']:.0f} ms){label}")
    growth = rows[-1][3] / rows[0][3]
    print(f"growth of the median change from {rows[0][0]} to {rows[-1][0]} messages: {growth:.2f}x")
    for code in codes:
        status = [r[5][code]["status"] for r in rows]
        cpu = [r[5][code]["status_cpu"] for r in rows]
        print(f"growth of `agent status` from {rows[0][0]} to {rows[-1][0]} messages: "
              f"{status[-1] / status[0]:.2f}x wall, {cpu[-1] / cpu[0]:.2f}x CPU"
              + ("" if code == here else f"  ({code})"))
    procs_keys = ("note", "status", "help", "note_cpu", "status_cpu", "help_cpu")
    print(json.dumps({"sizes": sizes, "change_median_ms": [round(r[3], 1) for r in rows],
                      "change_p95_ms": [round(r[4], 1) for r in rows],
                      "growth": round(growth, 2),
                      "processes_median_ms": {str(c): {k: [round(r[5][c][k], 1) for r in rows]
                                                       for k in procs_keys}
                                              for c in codes}}))


if __name__ == "__main__":
    main()
