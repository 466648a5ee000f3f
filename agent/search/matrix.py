"""The document vectors as one float32 matrix file a search scans: `.agent/index.sqlite-
vectors` beside the index, which a process memory-maps and scans with one matrix product
(measured by scripts/bench_search.py, see its docstring); past ann.ANN_AT vectors, the
graphs of ann.py are walked instead, and the scan serves what they do not yet hold.

Reading the BLOB rows of `vec` back cost every `agent search` process 0.7 s at 100,000
messages (fetching 100,000 rows and converting float16, which this numpy does slowly:
85-185 ms per 100,000 vectors); mapping the matrix costs nothing, and the page cache
keeps it between processes. float32, not float16 or int8, because numpy has no fast
product for those (float32 100,000 x 384: 12-20 ms; float16: 200 ms; int8 widened per
chunk: 26-64 ms). sqlite-vec was the other candidate; the Python here is built without
loadable SQLite extensions (`sqlite3.Connection.enable_load_extension` is missing), so it
cannot run at all where the project runs.

The matrix file holds the vectors up to a `seq` of `vec`; a search adds the rows made
since from `vec`, and leaves out the rows removed since, which a trigger lists in
`vec_gone`; when those grow past a hundredth of the file, the file is written again
(under the index's write lock).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from agent.fs.signature import signature
from agent.search.vectors import FORMAT, enabled, meta

if TYPE_CHECKING:     # numpy is imported where it is used: a command that scans none skips it
    import numpy as np
    from numpy.typing import NDArray

MAGIC = b"agent-vectors\n"
HEADER = 4096                 # bytes: MAGIC, then JSON, then spaces
CHUNK = 16384                 # rows per step when writing the file
# Rows added or removed since the file was written, past which it is written again
# (or a hundredth of its rows, if more): a process reads that many rows from `vec`.
REWRITE_AT = 1024
_F32 = "<f4"


def file_of(key: str) -> str:
    """The matrix file beside the index at `key` (its path)."""
    return f"{key}-vectors"


@dataclass
class _Matrix:
    sig: tuple[int, int, int] | None   # the file's signature when mapped (None: no file)
    epoch: str
    dim: int
    seqs: NDArray[np.int64]   # vec.seq of each row of the file, ascending
    ids: NDArray[np.int64]
    m: NDArray[np.float32]    # [n, dim], memory-mapped
    file_seq: int            # the newest seq the file holds
    seq: int                 # the newest seq held: the file's, then what was added
    top_seqs: list[NDArray[np.int64]]
    top_ids: list[NDArray[np.int64]]
    top: list[NDArray[np.float32]]   # [k, dim] blocks added from `vec` since the file
    floor: int = 0           # the file holds no row up to this seq (the graphs' part)


_CACHE: dict[str, _Matrix] = {}
# One thread at a time reads what `vec` holds beyond a process's matrix into it: two
# searches at once (`agent serve`'s conversations) each added the same new rows, and
# every later search of the process saw those documents twice.
_CACHING = threading.Lock()

# A scan of more rows than this is split between two threads when the process may use
# two cores (numpy lets go of Python's lock while it multiplies): 100,000 rows of 384
# took 13 ms on one thread and 8 ms on two here.
SPLIT_AT = 20000
_CORES = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
          else os.cpu_count() or 1)
_OTHER_HALF = None


def _scan(m, q):
    """Every row's similarity to the query (m @ q), in blocks (see _blocks), on two
    threads past SPLIT_AT rows."""
    global _OTHER_HALF
    if len(m) < SPLIT_AT or _CORES < 2:
        return _blocks(m, q, 0, len(m))
    if _OTHER_HALF is None:
        from concurrent.futures import ThreadPoolExecutor
        _OTHER_HALF = ThreadPoolExecutor(1, thread_name_prefix="vectors-scan")
    import numpy as np
    half = len(m) // 2
    first = _OTHER_HALF.submit(_blocks, m, q, 0, half)
    second = _blocks(m, q, half, len(m))
    return np.concatenate([first.result(), second])


# Rows multiplied at a time (6 MB at 384 dimensions). The matrix is memory-mapped, and a
# mapped page read stays in the process's memory: a whole scan of a million vectors held
# 1.5 GB. Each block's pages are let go once it is done (the file stays in the page
# cache for the next search), so memory stays at a few blocks whatever the history.
BLOCK = 4096


def _blocks(m, q, lo: int, hi: int):
    import numpy as np
    out = np.empty(hi - lo, np.float32)
    mapped = _mapping_of(m)
    for i in range(lo, hi, BLOCK):
        j = min(i + BLOCK, hi)
        out[i - lo:j - lo] = m[i:j] @ q
        if mapped is not None:
            _let_go(m, *mapped, i, j)
    return out


def _mapping_of(m) -> tuple[Any, int] | None:
    """The file mapping `m`'s rows lie in (ours, made by _rows_of_file) and where in it they start;
    None for a matrix in ordinary memory."""
    import mmap

    import numpy as np
    base = m
    while base is not None and not isinstance(base, mmap.mmap):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    if base is None:
        return None
    return base, m.ctypes.data - np.frombuffer(base, np.uint8, count=1).ctypes.data


def _let_go(m, mapped, at: int, i: int, j: int) -> None:
    """Drop rows i..j of the mapped matrix from this process's memory (MADV_DONTNEED: a
    file mapped read-only is read again from the page cache if touched again)."""
    import mmap
    row = m.shape[1] * m.itemsize
    start, end = at + i * row, at + j * row
    start -= start % mmap.PAGESIZE
    if hasattr(mapped, "madvise") and end > start:
        mapped.madvise(mmap.MADV_DONTNEED, start, end - start)


def _rows_of_file(path: str, offset: int, n: int, dim: int):
    """The file's n x dim float32 rows from `offset`, read through a mapping of our own
    (numpy's memmap keeps its mapping in a private attribute, and the scan must reach it
    to let pages go)."""
    import mmap

    import numpy as np
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype=_F32, count=n * dim, offset=offset).reshape(n, dim)


def _empty(epoch: str, dim: int, sig=None) -> _Matrix:
    import numpy as np
    return _Matrix(sig, epoch, dim, np.zeros(0, np.int64), np.zeros(0, np.int64),
                   np.zeros((0, dim), np.float32), 0, 0, [], [], [])


def _stat_sig(path: str) -> tuple[int, int, int] | None:
    """The file's signature (agent.fs.signature); None too when it cannot be looked at."""
    try:
        return signature(path)
    except OSError:
        return None


def _map(path: str, epoch: str | None, model: str | None, dim: int) -> _Matrix | None:
    """The file's matrix, if it is whole and for this index's vectors (`epoch` and
    `model` None: for whichever its header names)."""
    import numpy as np
    sig = _stat_sig(path)
    if sig is None:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER)
        if not head.startswith(MAGIC):
            return None
        h = json.loads(head[len(MAGIC):].decode("utf-8"))
        if not isinstance(h, dict) or not all(isinstance(h.get(k), int) for k in ("n", "seq", "dim")):
            return None                 # a header of another shape: not this file
        n = h["n"]
        epoch = cast(str, h.get("epoch")) if epoch is None else epoch
        if (h.get("format") != FORMAT or h.get("epoch") != epoch
                or (model is not None and h.get("model") != model)
                or int(h.get("dim", -1)) != dim or sig[1] != HEADER + n * 16 + n * dim * 4):
            return None
        if n == 0:
            out = _empty(epoch, dim, sig)
        else:
            seqs = np.fromfile(path, dtype="<i8", count=n, offset=HEADER)
            ids = np.fromfile(path, dtype="<i8", count=n, offset=HEADER + n * 8)
            m = _rows_of_file(path, HEADER + n * 16, n, dim)
            out = _Matrix(sig, epoch, dim, seqs, ids, m, 0, 0, [], [], [])
        out.seq = out.file_seq = h["seq"]
        out.floor = h.get("floor", 0) if isinstance(h.get("floor", 0), int) else 0
        return out
    except (OSError, ValueError):
        return None


def _write(db, path: str, epoch: str, model: str, dim: int, base: _Matrix | None,
           floor: int = 0) -> None:
    """Write the matrix file again: `base`'s rows still in `vec`, then the rows of `vec`
    after it, streamed (memory stays flat at any size), none up to `floor` (those the
    graphs hold, ann.py). Runs in a write transaction."""
    import numpy as np
    gone = np.array([r[0] for r in db.execute("SELECT seq FROM vec_gone")], np.int64)
    after = max(base.file_seq if base is not None else 0, floor)
    keep = None
    if base is not None and len(base.seqs):
        keep = ~np.isin(base.seqs, gone) & (base.seqs > floor)
    newest, more = db.execute("SELECT coalesce(max(seq), 0), count(*) FROM vec WHERE seq > ?",
                              (after,)).fetchone()
    n = (int(keep.sum()) if keep is not None else 0) + more
    seq = max(after, newest)
    tmp = f"{path}.{os.getpid()}.tmp"
    done = 0

    def put(f, seqs, ids, block):
        nonlocal done
        f.seek(HEADER + done * 8)
        f.write(np.asarray(seqs, "<i8").tobytes())
        f.seek(HEADER + (n + done) * 8)
        f.write(np.asarray(ids, "<i8").tobytes())
        f.seek(HEADER + n * 16 + done * dim * 4)
        f.write(np.ascontiguousarray(block, _F32).tobytes())
        done += len(seqs)

    try:
        with open(tmp, "wb") as f:
            head = MAGIC + json.dumps({"format": FORMAT, "epoch": epoch, "model": model,
                                       "dim": dim, "n": n, "seq": seq,
                                       "floor": floor}).encode("utf-8")
            f.write(head.ljust(HEADER, b" "))
            if keep is not None and base is not None:
                for i in range(0, len(base.seqs), CHUNK):
                    k = keep[i:i + CHUNK]
                    put(f, base.seqs[i:i + CHUNK][k], base.ids[i:i + CHUNK][k], base.m[i:i + CHUNK][k])
            last = after
            while True:
                rows = db.execute("SELECT seq, id, v FROM vec WHERE seq > ? ORDER BY seq LIMIT ?",
                                  (last, CHUNK)).fetchall()
                if not rows:
                    break
                block = np.frombuffer(b"".join(r[2] for r in rows), np.float16).astype(_F32)
                put(f, [r[0] for r in rows], [r[1] for r in rows], block)
                last = rows[-1][0]
            f.truncate(HEADER + n * 16 + n * dim * 4)
            f.flush()
            os.fsync(f.fileno())
        if done != n:
            raise OSError("the vectors changed while the file was written")
        os.replace(tmp, path)
    except BaseException:  # any: the temporary file goes, then the error is raised again
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    db.execute("DELETE FROM vec_gone WHERE seq <= ?", (seq,))


def _rewrite(db, key: str, dim: int, base: _Matrix | None, floor: int = 0) -> None:
    """Write the file again under the index's write lock, unless another process just did."""
    db.execute("BEGIN IMMEDIATE")
    try:
        epoch, model = meta(db, "vec_epoch"), meta(db, "embed_model")
        # Under the write lock no other process is writing one: a temporary file left
        # here is from a process that stopped halfway.
        for stale in glob.glob(glob.escape(file_of(key)) + ".*.tmp"):
            with contextlib.suppress(OSError):
                os.unlink(stale)
        if epoch and model and (base is None or _stat_sig(file_of(key)) == base.sig):
            _write(db, file_of(key), epoch, model, dim, base, floor)
        db.execute("COMMIT")
    except OSError:
        db.execute("ROLLBACK")      # a file that cannot be written: the rows in `vec` serve
    except BaseException:  # any: rolled back, then raised again
        db.execute("ROLLBACK")
        raise


def _load(db, key: str, dim: int, floor: int = 0) -> _Matrix:
    """This process's view of the index's vectors after `floor` (what the graphs do not
    hold): the mapped file, topped up with the rows added since (kept for the next
    search), and the file written again when what it lacks, or holds needlessly, has
    grown past a hundredth of it (or it is missing). What it returns no other thread
    changes."""
    with _CACHING:
        cached = _top_up(db, key, dim, floor)
        return replace(cached, top=list(cached.top), top_seqs=list(cached.top_seqs),
                       top_ids=list(cached.top_ids))


def prepare(db, key: str, dim: int) -> None:
    """What the next search would do first, done now: the matrix file written again when
    what it lacks has grown past its share, and this process's view of it topped up.
    `agent serve` calls it after it made vectors in the background, so that a person's
    search does not write the file."""
    from agent.search import ann

    segs = ann.read(key, meta(db, "vec_epoch") or "", meta(db, "embed_model") or "", dim)
    with _CACHING:
        _top_up(db, key, dim, segs.hi if segs else 0)


def _top_up(db, key: str, dim: int, floor: int) -> _Matrix:
    import numpy as np

    epoch, model = meta(db, "vec_epoch") or "", meta(db, "embed_model") or ""
    path = file_of(key)
    cached = _CACHE.get(key)
    if cached is None or cached.epoch != epoch or cached.dim != dim or cached.sig != _stat_sig(path):
        cached = _map(path, epoch, model, dim) or _empty(epoch, dim)
    if cached.floor > floor:
        # It left out rows the graphs no longer hold (their folder was deleted): made
        # again whole, as a missing file is.
        cached = _empty(epoch, dim)
    rows = db.execute("SELECT seq, id, v FROM vec WHERE seq > ? ORDER BY seq LIMIT ?",
                      (max(cached.seq, floor), 4 * CHUNK)).fetchall()
    behind = len(rows) + sum(len(s) for s in cached.top_seqs)
    gone = db.execute("SELECT count(*) FROM vec_gone").fetchone()[0]
    below = int(np.searchsorted(cached.seqs, floor, "right")) if floor else 0
    if ((cached.sig is None and behind)
            or behind + gone + below > max(REWRITE_AT, (len(cached.seqs) - below) // 100)):
        _rewrite(db, key, dim, cached if cached.sig is not None else None, floor)
        fresh = _map(path, epoch, model, dim)
        if fresh is not None:
            cached = fresh
            rows = db.execute("SELECT seq, id, v FROM vec WHERE seq > ? ORDER BY seq",
                              (max(cached.seq, floor),)).fetchall()
    if rows:
        if len(rows) == 4 * CHUNK:      # the file could not be written: read them all
            rows += db.execute("SELECT seq, id, v FROM vec WHERE seq > ? ORDER BY seq",
                               (rows[-1][0],)).fetchall()
        cached.top.append(np.frombuffer(b"".join(r[2] for r in rows), np.float16)
                          .astype(_F32).reshape(len(rows), dim))
        cached.top_seqs.append(np.array([r[0] for r in rows], np.int64))
        cached.top_ids.append(np.array([r[1] for r in rows], np.int64))
        cached.seq = rows[-1][0]
    _CACHE[key] = cached
    return cached


def scan_file(key: str, qvec):
    """The query against the matrix file as this process maps it, without the database
    (a search's worker thread runs it while the search reads the words): a token for
    `nearest`, or None."""
    import numpy as np
    from agent.search import ann
    path = file_of(key)
    with _CACHING:
        cached = _CACHE.get(key)
        if cached is None or cached.sig != _stat_sig(path) or cached.dim != qvec.shape[0]:
            cached = _map(path, None, None, qvec.shape[0])
            if cached is None:
                return None
            _CACHE[key] = cached        # what it lacks, `nearest` reads from the index
    segs = ann.read(key, cached.epoch, None, qvec.shape[0])
    start = int(np.searchsorted(cached.seqs, segs.hi, "right")) if segs else 0
    if len(cached.seqs) <= start:
        return None
    return cached.m, start, _scan(cached.m[start:], np.asarray(qvec, _F32))


def nearest(db, key: str, qvec, k: int, scanned=None) -> tuple[list[tuple[int, float]], float, int]:
    """The k documents closest to the query vector, as (doc id, cosine similarity), the
    mean similarity of all documents to it (what "unrelated" is for this query), and how
    many documents were compared: the rows the graphs hold (ann.py) walked, the others
    scanned. `scanned`: what `scan_file` gave for this query (used if the file is the same)."""
    import numpy as np
    from agent.search import ann

    if not enabled(db):
        return [], 0.0, 0
    dim = qvec.shape[0]
    segs = ann.read(key, meta(db, "vec_epoch") or "", meta(db, "embed_model") or "", dim)
    floor = segs.hi if segs else 0
    mat = _load(db, key, dim, floor)
    q = np.asarray(qvec, _F32)
    start = int(np.searchsorted(mat.seqs, floor, "right")) if floor else 0
    if scanned is not None and scanned[0] is mat.m and scanned[1] == start:
        parts = [scanned[2]]
    else:
        parts = [_scan(mat.m[start:], q)] if len(mat.seqs) > start else []
    parts += [t @ q for t in mat.top]
    seqs = np.concatenate([mat.seqs[start:], *mat.top_seqs])
    ids = np.concatenate([mat.ids[start:], *mat.top_ids])
    scores = np.concatenate(parts) if parts else np.zeros(0, _F32)
    dead = seqs <= floor                # held by the graphs too: counted there
    gone = [r[0] for r in db.execute("SELECT seq FROM vec_gone")]
    if gone:
        dead |= np.isin(seqs, np.array(gone, np.int64))
    if dead.any():
        scores = scores.copy()
        scores[dead] = -np.inf
    live = int(np.isfinite(scores).sum())
    total = float(scores[np.isfinite(scores)].sum()) if live else 0.0
    found: list[tuple[int, float]] = []
    if segs is not None and segs.items:
        near, _ = ann.search(key, segs, q, k)
        # A row removed since its graph was built is no longer in `vec`: left out here.
        of_seq = dict(db.execute(f"SELECT seq, id FROM vec WHERE seq IN "
                                 f"({','.join('?' * len(near))})", [s for s, _ in near])
                      ) if near else {}
        found = [(of_seq[s], sim) for s, sim in near if s in of_seq]
        held = sum(s.n for s in segs.items)
        total += float(ann.total(segs) @ q.astype(np.float64))
        live += held
    if live == 0 or k <= 0:
        return [], 0.0, 0
    mean = total / live
    n = min(k, int(np.isfinite(scores).sum()))
    if n:
        top = np.argpartition(-scores, n - 1)[:n]
        found += [(int(ids[i]), float(scores[i])) for i in top]
    found.sort(key=lambda x: -x[1])
    return found[:k], mean, live
