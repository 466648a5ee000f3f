#!/usr/bin/env python3
"""How many git processes `agent sync` starts, and how long it takes, against plain
`git pull --rebase && git push` on the same repositories (issue 28, item 4; issue 36,
item 3: a pull).

Vault A and its clone B share one bare remote, as do two plain git clones. Counted
with GIT_TRACE (each git process logs its start), medians of --runs, for a sync with
nothing to do, a sync that pushes one change (a note) and a sync that pulls one turn
(B appends a user and an assistant line to a session file in one commit, as a turn
does, and pushes it; A syncs), each against plain git doing the same with one
commit. `agent path` in the same vault is the CLI's own start, shown apart. Each is
timed twice: wall-clock, and the CPU time of the command and every process it
started (user + system), which a machine busy with other work disturbs far less.
The pull's ratio is also the median of each run's own ratio (the runs of one pair
are taken one after the other, so the load they meet is alike).

    python scripts/bench_sync_git.py [--runs 5]
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
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x",
       "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x", "AGENT_EMBED": "off"}
# As installed: modules compiled once, not at every start (PYTHONDONTWRITEBYTECODE would
# charge each run for compiling every module it imports); the bytecode goes to a
# folder of its own, not into the source tree.
ENV.pop("PYTHONDONTWRITEBYTECODE", None)
ENV["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="bench-pycache-")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def traced(cmd: list[str] | str, cwd: Path) -> tuple[float, int, float]:
    """(seconds, git processes started, CPU seconds of it and its children) of one
    command."""
    with tempfile.NamedTemporaryFile(suffix=".trace") as tr:
        env = {**ENV, "GIT_TRACE": tr.name}
        cpu = _cpu()
        t = time.perf_counter()
        p = subprocess.run(cmd, cwd=cwd, env=env, shell=isinstance(cmd, str),
                           capture_output=True, text=True)
        took = time.perf_counter() - t
        cpu = _cpu() - cpu
        if p.returncode:
            raise SystemExit(f"{cmd} failed: {p.stdout}{p.stderr}")
        text = Path(tr.name).read_text(errors="replace")
    # Every git process logs its own start as a "built-in" line (the parent's
    # run_command line for the same child is not counted again).
    starts = sum(1 for line in text.splitlines() if "trace: built-in: git" in line)
    return took, starts, cpu


def agent(*args) -> list[str]:
    return [sys.executable, "-m", "agent", *args]


# One turn's commit, as a chat turn makes it: two lines appended to the month's session.
TURN = """
import json, sys
from agent.vault.change import Change
from agent.vault.repo import Vault
v = Vault.open(sys.argv[1])
n = sys.argv[2]
lines = [json.dumps({"id": f"b{n}-{r}", "ts": "2027-01-01T09:00:00+00:00", "role": r,
                     "content": f"turn {n}: what about the garden trip? ({r})"})
         for r in ("user", "assistant")]
with v.locked():
    v.append_lines("sessions/cli/default/2027-01.jsonl", lines)
    v.commit(Change("chat", f"turn {n}", scope="cli/default"))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    remote = tmp / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    a = tmp / "a"
    subprocess.run(agent("--vault", str(a), "init"), env=ENV, check=True, capture_output=True)
    subprocess.run(["git", "remote", "add", "origin", str(remote)], cwd=a, check=True)
    subprocess.run(["git", "push", "-q", "-u", "origin", "HEAD"], cwd=a, env=ENV, check=True)
    branch = subprocess.run(["git", "branch", "--show-current"], cwd=a, capture_output=True,
                            text=True, check=True).stdout.strip()
    subprocess.run(["git", "symbolic-ref", "HEAD", f"refs/heads/{branch}"], cwd=remote, check=True)
    subprocess.run(agent("--vault", str(a), "sync"), env=ENV, check=True, capture_output=True)
    plain = tmp / "plain"
    subprocess.run(["git", "clone", "-q", str(remote), str(plain)], check=True, env=ENV)
    b = tmp / "b"
    subprocess.run(agent("clone", str(remote), str(b)), env=ENV, check=True, capture_output=True)
    plain2 = tmp / "plain2"
    subprocess.run(["git", "clone", "-q", str(remote), str(plain2)], check=True, env=ENV)
    rows: dict[str, list[tuple[float, int, float]]] = {}
    for run in range(args.runs):
        rows.setdefault("agent path (CLI start)", []).append(traced(agent("path"), a))
        # Both clones share the remote: each first takes in the other's change, untimed,
        # so that "nothing to do" is nothing to do.
        traced(agent("sync"), a)
        rows.setdefault("agent sync, nothing to do", []).append(traced(agent("sync"), a))
        subprocess.run(agent("note", "one more"), cwd=a, env=ENV, check=True, capture_output=True)
        rows.setdefault("agent sync, one change", []).append(traced(agent("sync"), a))
        traced("git pull -q --rebase", plain)
        rows.setdefault("git pull --rebase && git push, nothing", []).append(
            traced("git pull -q --rebase && git push -q", plain))
        (plain / "x.md").write_text(f"{time.time()}\n")
        subprocess.run("git add -A && git commit -qm x", shell=True, cwd=plain, env=ENV, check=True)
        rows.setdefault("git pull --rebase && git push, one change", []).append(
            traced("git pull -q --rebase && git push -q", plain))
        # Pulling one turn: B (and the second plain clone) commit and push, untimed.
        for v in (a, b):
            traced(agent("sync"), v)
        subprocess.run([sys.executable, "-c", TURN, str(b), str(run)], env=ENV, check=True)
        traced(agent("sync"), b)
        rows.setdefault("agent sync, pulls one turn", []).append(traced(agent("sync"), a))
        for clone in (plain, plain2):
            traced("git pull -q --rebase", clone)
        (plain2 / "y.md").write_text(f"{time.time()}\n")
        subprocess.run("git add -A && git commit -qm y && git push -q", shell=True, cwd=plain2,
                       env=ENV, check=True)
        rows.setdefault("git pull --rebase && git push, pulls one", []).append(
            traced("git pull -q --rebase && git push -q", plain))
    med = {name: statistics.median(v[0] for v in vals) for name, vals in rows.items()}
    cpu = {name: statistics.median(v[2] for v in vals) for name, vals in rows.items()}
    for name, vals in rows.items():
        print(f"{name:<44} {med[name] * 1000:7.0f} ms  {cpu[name] * 1000:5.0f} ms CPU  "
              f"{statistics.median(v[1] for v in vals):4.0f} git processes")
    # The target (issue 28): beyond the CLI's own start, within 1.5x of plain git.
    for what, m in (("", med), (" (CPU)", cpu)):
        start = m["agent path (CLI start)"]
        for case in ("nothing to do", "one change", "pulls one turn"):
            beyond = m[f"agent sync, {case}"] - start
            git = m[f"git pull --rebase && git push, "
                    f"{case.replace(' to do', '').replace(' turn', '')}"]
            print(f"sync beyond the CLI's start, {case:<14} {beyond * 1000:7.0f} ms = "
                  f"{beyond / git:4.2f}x plain git{what} (target 1.5x)")
    # The same for the pull, paired: each run's (sync - CLI start) / plain git, median.
    pairs = list(zip(rows["agent path (CLI start)"], rows["agent sync, pulls one turn"],
                     rows["git pull --rebase && git push, pulls one"]))
    for what, i in (("", 0), (" (CPU)", 2)):
        ratios = [(s[i] - c[i]) / g[i] for c, s, g in pairs]
        print(f"pull of one turn, median of paired ratios{what:<6}      "
              f"{statistics.median(ratios):4.2f}x plain git (target 1.5x)")

if __name__ == "__main__":
    main()
