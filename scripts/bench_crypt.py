#!/usr/bin/env python3
"""What an encrypted sync remote costs beside a plain one (issue 45), measured in one run.

    python scripts/bench_crypt.py [--commits 10000] [--turns 15] [--repeat 3] [--http]

Four measures, each as a ratio encrypted / plain from runs made one after the other
(paired, the order alternated), with medians:

1. **one turn**: two vaults with the same history, one synced to a plain bare remote
   and one to an encrypted remote; each round both get a turn (two session lines, one
   commit) and `agent sync` (the operation, in process); the time of each sync.
2. **clone** of a vault of N commits (one note a commit): `agent clone` (the
   operation) from each remote, the encrypted one as one pack (pushed once) and as
   a remote filled by 200 syncs (packs merged as they pile up).
3. **bytes the remote stores**: every file under each bare repository, as pushed, and
   after the host's own `git gc`.
4. **forget** of a phrase on a vault of N commits synced to each remote: `agent forget`
   (the operation: rewrite, prune, push, verify), and the bytes the push sent.

Measured 2026-11-28 on the shared 2-core machine under a load average of 20 to 38 from
other work (absolute times inflated several times; the ratios are what to read),
`--commits 10000 --turns 15 --repeat 3`:

    one turn, sync:        encrypted 4608 ms, plain 980 ms, ratio 4.71 (median of 15 pairs)
    first push:            encrypted 2.76 s, plain 2.78 s, ratio 0.99
    200 pushes of 50 commits each: the remote then holds 5 packs
    clone of 10000 commits (one pack): encrypted 32.79 s, plain 26.65 s, ratio 1.53
    clone of 10000 commits (200 syncs): encrypted 29.73 s, plain 26.65 s, ratio 1.03
    bytes stored: plain 4.49 MB, encrypted 3.37 MB (0.75x), after 200 syncs 9.36 MB (2.09x)
      after the host's gc: plain 5.27 MB, encrypted 3.37 MB (0.64x), after 200 syncs 0.64x
    forget on 10000 commits: ratio 1.16; the host received 3.59 MB (a full re-upload)
      against 4.71 MB

The remotes are bare repositories on this disk reached as file:// URLs (`--http`:
served by git http-backend on 127.0.0.1, as tests/githttp.py does), so the network
costs nothing and what is measured is the helper, git's packing and the encryption.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from agent.vault.change import Change  # noqa: E402
from agent.ops.vaults import init_vault, open_vault  # noqa: E402
from agent.vault.repo import Vault  # noqa: E402

PHRASE = "the vault code is orchid-lantern-77"


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    return path


def history(vault: Vault, commits: int, phrase_at: int | None = None) -> None:
    """`commits` commits on the vault's branch, one note each (git fast-import)."""
    start = datetime(2025, 1, 1, 9, tzinfo=timezone.utc)
    head = vault.head()
    out = [f"commit refs/heads/main\nmark :1\ncommitter bench <b@x> {int(start.timestamp())} "
           f"+0000\ndata 5\nstart\nfrom {head}\n"]
    days: dict[str, list[str]] = {}
    for i in range(commits):
        t = start + timedelta(minutes=20 * i)
        rel = f"memory/{t:%Y-%m-%d}.md"
        text = PHRASE if i == phrase_at else f"note number {i} about the garden and plan {i % 31}"
        lines = days.setdefault(rel, [f"# {t:%Y-%m-%d}", ""])
        lines.append(f"- {t:%H:%M} {text}")
        body = ("\n".join(lines) + "\n").encode()
        msg = f"note: add 1 line to {rel}".encode()
        out.append(f"commit refs/heads/main\ncommitter bench <b@x> {int(t.timestamp())} +0000\n"
                   f"data {len(msg)}\n{msg.decode()}\nM 100644 inline {rel}\n"
                   f"data {len(body)}\n{body.decode()}\n")
    subprocess.run(["git", "fast-import", "--quiet", "--force"], cwd=vault.root, check=True,
                   input="".join(out).encode())
    vault.git("reset", "--hard", "-q", "main")
    vault.git("gc", "-q")


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def median_ratio(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    enc = statistics.median(e for e, _ in pairs)
    plain = statistics.median(p for _, p in pairs)
    return enc, plain, statistics.median(e / p for e, p in pairs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=10000)
    ap.add_argument("--turns", type=int, default=15)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--http", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-crypt-"))
    home = tmp / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Bench\n\temail = b@x\n"
                                     "[init]\n\tdefaultBranch = main\n")
    os.environ.update({"HOME": str(home), "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
                       "GIT_CONFIG_NOSYSTEM": "1", "AGENT_KEY_FILE": str(tmp / "key.txt"),
                       "AGENT_EMBED": "off"})
    from agent.ops import forget as forgetting
    from agent.ops import remotes
    from agent.sync import remotes as syncing

    server = None
    if args.http:
        from githttp import GitHttp
        server = GitHttp(tmp / "served").start()

    def remote_pair(tag: str) -> tuple[str, str, Path, Path]:
        """(plain URL, encrypted host URL, plain bare, encrypted bare)."""
        if server is not None:
            p, e = server.bare(f"{tag}-plain.git"), server.bare(f"{tag}-enc.git")
            return server.url(p.name), server.url(e.name), p, e
        p, e = bare(tmp / f"{tag}-plain.git"), bare(tmp / f"{tag}-enc.git")
        # file:// as a host is reached: a plain path would let `git clone` hard-link the
        # objects instead of sending a pack (0.04 s for any size).
        return f"file://{p}", f"file://{e}", p, e

    now = datetime.now(timezone.utc)
    try:
        # ---- 1. one turn --------------------------------------------------------------
        base, _ = init_vault(tmp / "base")
        history(base, 200)
        purl, eurl, _, _ = remote_pair("turn")
        vp = open_vault(Path(shutil.copytree(base.root, tmp / "turn-plain", symlinks=True)))
        ve = open_vault(Path(shutil.copytree(base.root, tmp / "turn-enc", symlinks=True)))
        remotes.add(vp, "origin", purl, False, now)
        remotes.add(ve, "origin", eurl, True, now)
        syncing.sync(vp)
        syncing.sync(ve)
        pairs = []
        for i in range(args.turns):
            for v in (vp, ve):
                with v.locked():
                    v.append_lines("sessions/cli/default/2026-11.jsonl", [json.dumps(
                        {"id": f"m{i}{r}", "ts": "2026-11-20T10:00:00+00:00", "role": r,
                         "content": f"turn {i} {r}", "turn": i}) for r in ("user", "assistant")])
                    v.commit(Change("chat", f"turn {i}"))
            order = [(ve, "e"), (vp, "p")] if i % 2 else [(vp, "p"), (ve, "e")]
            got = {k: timed(lambda v=v: syncing.sync(v)) for v, k in order}
            pairs.append((got["e"], got["p"]))
        e, p, r = median_ratio(pairs)
        print(f"one turn, sync:        encrypted {e * 1000:.0f} ms, plain {p * 1000:.0f} ms, "
              f"ratio {r:.2f} (median of {args.turns} pairs)")

        # ---- 2 and 3. clone and bytes -------------------------------------------------
        big, _ = init_vault(tmp / "big")
        t = timed(lambda: history(big, args.commits))
        print(f"built a vault of {args.commits} commits in {t:.1f} s")
        purl, eurl, pbare, ebare = remote_pair("big")
        vp = open_vault(Path(shutil.copytree(big.root, tmp / "big-plain", symlinks=True)))
        ve = open_vault(Path(shutil.copytree(big.root, tmp / "big-enc", symlinks=True)))
        remotes.add(vp, "origin", purl, False, now)
        remotes.add(ve, "origin", eurl, True, now)
        tp = timed(lambda: syncing.sync(vp))
        te = timed(lambda: syncing.sync(ve))
        print(f"first push:            encrypted {te:.2f} s, plain {tp:.2f} s, ratio {te / tp:.2f}")
        # The same history pushed in 200 syncs (a remote filled as it is used).
        _, iurl, _, ibare = remote_pair("inc")
        vi = open_vault(Path(shutil.copytree(base.root, tmp / "inc", symlinks=True)))
        vi.git("remote", "add", "origin", f"agent-crypt::{iurl}")
        shas = big.git("rev-list", "--reverse", "--first-parent", "main").split()
        step = max(1, len(shas) // 200)
        vi.git("fetch", "-q", str(big.root), "main:refs/heads/incoming")
        t = time.perf_counter()
        for k in range(step, len(shas) + step, step):
            vi.git("update-ref", "refs/heads/main", shas[min(k, len(shas)) - 1])
            vi.git("push", "-q", "origin", "main:refs/heads/main")
        print(f"200 pushes of {step} commits each: {time.perf_counter() - t:.1f} s")
        vi.git("reset", "--hard", "-q", "main")
        files = subprocess.run(["git", "ls-tree", "--name-only", "agent-crypt"], cwd=ibare,
                               capture_output=True, text=True).stdout.split()
        print(f"  the remote then holds {len(files) - 1} packs")
        clones = []
        for i in range(args.repeat):
            order = ["e", "i", "p"] if i % 2 else ["p", "i", "e"]
            got = {}
            for k in order:
                url = {"p": purl, "e": f"agent-crypt::{eurl}", "i": f"agent-crypt::{iurl}"}[k]
                dest = tmp / f"clone-{k}-{i}"
                got[k] = timed(lambda url=url, dest=dest: syncing.clone(url, dest))
                shutil.rmtree(dest)
            clones.append(got)
        for k, label in (("e", "one pack"), ("i", "200 syncs")):
            e, p, r = median_ratio([(c[k], c["p"]) for c in clones])
            print(f"clone of {args.commits} commits ({label}): encrypted {e:.2f} s, plain "
                  f"{p:.2f} s, ratio {r:.2f} (median of {args.repeat})")
        sp, se, si = size(pbare), size(ebare), size(ibare)
        print(f"bytes stored: plain {sp / 1e6:.2f} MB, encrypted {se / 1e6:.2f} MB "
              f"({se / sp:.2f}x), encrypted after 200 syncs {si / 1e6:.2f} MB ({si / sp:.2f}x)")
        for path in (pbare, ebare, ibare):
            subprocess.run(["git", "gc", "-q", "--prune=now"], cwd=path, check=True)
        sp, se, si = size(pbare), size(ebare), size(ibare)
        print(f"  after the host's gc: plain {sp / 1e6:.2f} MB, encrypted {se / 1e6:.2f} MB "
              f"({se / sp:.2f}x), after 200 syncs {si / 1e6:.2f} MB ({si / sp:.2f}x)")

        # ---- 4. forget ----------------------------------------------------------------
        seed, _ = init_vault(tmp / "seed")
        history(seed, args.commits, phrase_at=args.commits // 2)
        forgets = []
        for i in range(args.repeat):
            got = {}
            for k in (["e", "p"] if i % 2 else ["p", "e"]):
                purl, eurl, pb, eb = remote_pair(f"forget{i}{k}")
                v = open_vault(Path(shutil.copytree(seed.root, tmp / f"forget-{i}-{k}",
                                                    symlinks=True)))
                remotes.add(v, "origin", eurl if k == "e" else purl, k == "e", now)
                syncing.sync(v)
                where = eb if k == "e" else pb
                before = size(where)
                got[k] = timed(lambda v=v: forgetting.forget(v, PHRASE, now, sync_first=False))
                got[k + "bytes"] = size(where) - before
            forgets.append(got)
        e, p, r = median_ratio([(f["e"], f["p"]) for f in forgets])
        eb = statistics.median(f["ebytes"] for f in forgets)
        pb = statistics.median(f["pbytes"] for f in forgets)
        print(f"forget on {args.commits} commits: encrypted {e:.2f} s, plain {p:.2f} s, ratio "
              f"{r:.2f}; the host received {eb / 1e6:.2f} MB (a full re-upload) against "
              f"{pb / 1e6:.2f} MB")
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
