#!/usr/bin/env python3
"""Meaning-search over a life's history (issues 36 and 46): `agent search --mode hybrid`
at 1,000 to 1,000,000 messages, its CPU time (user + system of the process), wall time
and peak memory (RSS), as ratios to the smallest vault, in one run, the sizes
alternated.

Embedding a million messages takes hours, so the vectors are made up: after the words
are indexed (vaults as scripts/bench_million.py builds them, under --keep), every
document gets a unit vector near one of 2,000 topics (real embeddings cluster; uniform
random vectors are the worst case for a graph), stored as the index stores a made one
(`vec`, float16), then the matrix file and the nearest-neighbour graphs are made by the
index's own upkeep (agent/search/vectors.py `graphs`, ann.py), as `agent import` or
`agent index embed` leaves them, with nothing queued. The query is embedded by the real
model, so each search costs what a person's does. `--scan` deletes the graphs first:
every search scans every vector, as before issue 46.

The graphs' files are kept under --keep and reused: how they were written decides how
the page cache holds them (ann.py `_build`: segments written by code before that change
sit in 4 KB pages, and each walk costs the kernel three times as much). To measure a
change to how segments are built, build its own graphs (another --keep folder, or a copy
of graphs{n} with its `.agent/index.sqlite-ann` removed and `vectors.graphs` run on it).

    python scripts/bench_dense_scale.py [--sizes 1000,100000,1000000] [--runs 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
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
    """Give every document of the vault's index a made-up vector, as a built index holds
    them (the vec tables in place and nothing queued), then let the index's upkeep make
    the graphs (past ann.ANN_AT vectors) and the matrix file of the rest."""
    import numpy as np

    from agent.search import embed, vectors

    os.environ[embed.ENV] = "on"         # the words-only vaults' setting, here and after
    emb = embed.load()
    key = root / ".agent" / "index.sqlite"
    db = sqlite3.connect(key, isolation_level=None)
    vectors.ensure(db, emb.name)
    ids = np.array([r[0] for r in db.execute("SELECT id FROM docs ORDER BY id")], np.int64)
    n, dim = len(ids), emb.dim
    rng = np.random.default_rng(7)
    topics = rng.standard_normal((2000, dim)).astype("<f4")
    db.execute("BEGIN")
    db.execute("DELETE FROM vec")
    for i in range(0, n, 65536):
        k = min(65536, n - i)
        block = topics[rng.integers(0, len(topics), k)] + 0.8 * rng.standard_normal((k, dim)).astype("<f4")
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        half = block.astype(np.float16)
        db.executemany("INSERT INTO vec(id, h, v) VALUES (?, ?, ?)",
                       [(int(d), int(d), half[j].tobytes()) for j, d in enumerate(ids[i:i + k])])
    db.execute("DELETE FROM vec_pending")
    db.execute("DELETE FROM vec_gone")
    db.execute("COMMIT")
    t = time.perf_counter()
    made = vectors.graphs(db, dim)
    print(f"  {n:,} vectors: {made:,} put into graphs in {time.perf_counter() - t:.0f} s",
          flush=True)
    db.close()


def vault_of(keep: Path, n: int) -> Path:
    words = bench_common_words.vault_of(keep, n)
    root = keep / f"graphs{n}"
    if not (root / ".agent" / "built").exists():
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(words, root, symlinks=True)
        synthesize(root)
        (root / ".agent" / "built").write_text("")
    return root


def search(root: Path) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds, peak RSS in MB) of one hybrid `agent search` in a new
    process."""
    t = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "RSS %M CPU %U %S", sys.executable, "-m", "agent",
                        "--vault", str(root), "search", "--mode", "hybrid", "garden trip"],
                       env={**os.environ, **ENV}, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, cwd=tempfile.gettempdir())  # not this checkout's code
    took = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(f"search failed ({p.returncode}): {p.stderr[-500:]}")
    m = re.search(r"RSS (\d+) CPU ([\d.]+) ([\d.]+)", p.stderr)
    return float(m.group(2)) + float(m.group(3)), took, int(m.group(1)) // 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "bench-common-words")
    ap.add_argument("--scan", action="store_true",
                    help="delete the graphs first: every search scans every vector")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    roots = {n: vault_of(args.keep, n) for n in sizes}
    if args.scan:
        for root in roots.values():
            shutil.rmtree(root / ".agent" / "index.sqlite-ann", ignore_errors=True)
    cpu: dict[int, list[float]] = {n: [] for n in sizes}
    wall: dict[int, list[float]] = {n: [] for n in sizes}
    peaks: dict[int, list[int]] = {n: [] for n in sizes}
    for n in sizes:
        search(roots[n])                     # once, so the page cache holds each alike
    for _ in range(args.runs):
        for n in sizes:
            c, w, mb = search(roots[n])
            cpu[n].append(c)
            wall[n].append(w)
            peaks[n].append(mb)
    c0, w0, p0 = (statistics.median(cpu[sizes[0]]), statistics.median(wall[sizes[0]]),
                  max(peaks[sizes[0]]))
    how = "every vector scanned" if args.scan else "graphs past ann.ANN_AT vectors"
    print(f"hybrid search 'garden trip' ({how}), medians of {args.runs} runs; ratio to {sizes[0]:,}:")
    for n in sizes:
        c, w, p = statistics.median(cpu[n]), statistics.median(wall[n]), max(peaks[n])
        print(f"{n:>10,} messages  CPU {c * 1000:6.0f} ms ({c / c0:.2f}x)  wall {w * 1000:6.0f} ms "
              f"({w / w0:.2f}x)  peak {p:5d} MB ({p / p0:.2f}x)")


if __name__ == "__main__":
    main()
