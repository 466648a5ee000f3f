#!/usr/bin/env python3
"""Meaning-search over a life's history (issue 36): `agent search --mode hybrid` at
1,000 to 1,000,000 messages, its wall time and peak memory (RSS), as ratios to the
smallest vault, in one run.

Embedding a million messages takes hours, so the vectors are made up: after the words
are indexed (vaults as scripts/bench_million.py builds them, under --keep), every
document gets a random unit vector written in the index's own matrix file format, as
`agent index rebuild` would leave it, with nothing left queued. The query is embedded by
the real model, so each search costs what a person's does.

    python scripts/bench_dense_scale.py [--sizes 1000,100000,1000000] [--runs 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).absolute().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
# AGENT_BENCH_CODE: another checkout whose code runs the searches (a before/after pair).
sys.path.insert(0, os.environ.get("AGENT_BENCH_CODE") or str(ROOT))

import bench_common_words  # noqa: E402

ENV = {**bench_common_words.ENV, "AGENT_EMBED": "on",
       "PYTHONPATH": os.environ.get("AGENT_BENCH_CODE") or str(ROOT)}


def synthesize(root: Path) -> None:
    """Give every document of the vault's index a random unit vector, as a built index
    holds them (the vec tables in place, the matrix file whole, nothing queued)."""
    import numpy as np

    from agent.search import embed, vectors

    emb = embed.load()
    key = root / ".agent" / "index.sqlite"
    db = sqlite3.connect(key, isolation_level=None)
    vectors.ensure(db, emb.name)
    ids = np.array([r[0] for r in db.execute("SELECT id FROM docs ORDER BY id")], np.int64)
    n, dim = len(ids), emb.dim
    epoch = db.execute("SELECT value FROM meta WHERE key = 'vec_epoch'").fetchone()[0]
    rng = np.random.default_rng(7)
    path = vectors.file_of(str(key))
    with open(path, "wb") as f:
        head = vectors.MAGIC + json.dumps({"format": vectors.FORMAT, "epoch": epoch,
                                           "model": emb.name, "dim": dim, "n": n,
                                           "seq": n}).encode()
        f.write(head.ljust(vectors.HEADER, b" "))
        f.write(np.arange(1, n + 1, dtype="<i8").tobytes())
        f.write(ids.astype("<i8").tobytes())
        for i in range(0, n, 65536):
            block = rng.standard_normal((min(65536, n - i), dim)).astype("<f4")
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            f.write(block.tobytes())
    db.execute("DELETE FROM vec_pending")
    db.execute("INSERT OR REPLACE INTO sqlite_sequence(name, seq) VALUES ('vec', ?)", (n,))
    db.close()


def vault_of(keep: Path, n: int) -> Path:
    words = bench_common_words.vault_of(keep, n)
    root = keep / f"dense{n}"
    if not (root / ".agent" / "index.sqlite-vectors").exists():
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(words, root, symlinks=True)
        synthesize(root)
    return root


def search(root: Path) -> tuple[float, int]:
    """(seconds, peak RSS in MB) of one hybrid `agent search` in a new process."""
    t = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "RSS %M", sys.executable, "-m", "agent",
                        "--vault", str(root), "search", "--mode", "hybrid", "garden trip"],
                       env={**os.environ, **ENV}, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, cwd=tempfile.gettempdir())  # not this checkout's code
    took = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(f"search failed ({p.returncode}): {p.stderr[-500:]}")
    return took, int(re.search(r"RSS (\d+)", p.stderr).group(1)) // 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "bench-common-words")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    roots = {n: vault_of(args.keep, n) for n in sizes}
    times: dict[int, list[float]] = {n: [] for n in sizes}
    peaks: dict[int, list[int]] = {n: [] for n in sizes}
    for n in sizes:
        search(roots[n])                     # once, so the page cache holds each alike
    for _ in range(args.runs):
        for n in sizes:
            s, mb = search(roots[n])
            times[n].append(s)
            peaks[n].append(mb)
    t0, p0 = statistics.median(times[sizes[0]]), max(peaks[sizes[0]])
    print(f"hybrid search 'garden trip', medians of {args.runs} runs; ratio to {sizes[0]:,}:")
    for n in sizes:
        t, p = statistics.median(times[n]), max(peaks[n])
        print(f"{n:>10,} messages  {t * 1000:7.0f} ms ({t / t0:.2f}x)  peak {p:5d} MB ({p / p0:.2f}x)")


if __name__ == "__main__":
    main()
