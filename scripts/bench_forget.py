"""What `agent forget` and the following `agent sync` on a second clone cost (issue 26).

    python scripts/bench_forget.py [--commits 1000]

Builds a vault of N note commits (one of them holding the phrase) pushed to a bare
remote, clones it, then times `agent forget --yes PHRASE` on the first clone (survey,
rewrite of every branch, prune, index rebuild, push, verification) and, on the second,
`agent sync` (the tombstone held: phrase recovered to count the commits it would
rewrite), `agent sync accept` (same rewrite, prune) and `agent sync` (merge).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path


def agent(*args, vault: Path) -> str:
    p = subprocess.run([sys.executable, "-m", "agent", "--vault", str(vault), *args],
                       capture_output=True, text=True, input="")
    if p.returncode:
        raise SystemExit(f"agent {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
    return p.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=1000)
    args = ap.parse_args()
    os.environ.setdefault("AGENT_EMBED", "off")
    from agent.stores import memory
    from agent.vault.change import Change
    from agent.vault.repo import Vault
    from agent.ops.vaults import LAYOUT

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(tmp / "r.git")],
                       check=True)
        vault, _ = Vault.init(tmp / "a", LAYOUT)
        start = datetime(2026, 1, 1, tzinfo=timezone.utc)
        for i in range(args.commits):
            t = start + timedelta(hours=i)
            text = ("the vault code is orchid-lantern-77" if i == args.commits // 2
                    else f"note number {i} about the garden")
            rel = memory.daily_path(t.date())
            with vault.locked():
                vault.append_lines(rel, [memory.note_line(text, t)],
                                  header=memory.daily_header(t.date()))
                vault.commit(Change("note", f"add 1 line to {rel}"))
        vault.git("remote", "add", "origin", str(tmp / "r.git"))
        agent("sync", vault=vault.root)
        subprocess.run([sys.executable, "-m", "agent", "clone", str(tmp / "r.git"),
                        str(tmp / "b")], check=True, capture_output=True)
        t0 = time.perf_counter()
        out = agent("forget", "--yes", "orchid-lantern-77", vault=vault.root)
        t1 = time.perf_counter()
        held = agent("sync", vault=tmp / "b")
        t2 = time.perf_counter()
        agent("sync", "accept", vault=tmp / "b")
        t3 = time.perf_counter()
        agent("sync", vault=tmp / "b")
        t4 = time.perf_counter()
        assert "every object: 0" in out and "held: forgotten phrase" in held
        print(f"{args.commits} commits: agent forget {t1 - t0:.1f} s; on the other clone "
              f"agent sync (held) {t2 - t1:.1f} s, agent sync accept {t3 - t2:.1f} s, "
              f"agent sync {t4 - t3:.1f} s")


if __name__ == "__main__":
    main()
