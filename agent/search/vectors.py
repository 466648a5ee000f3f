"""Document vectors for dense retrieval, kept in the derived index beside the FTS tables.

Storage: one float16 BLOB per document in `vec` of `.agent/index.sqlite` (what the
index's transactions keep current), and beside it `.agent/index.sqlite-vectors`, the
same vectors as one float32 matrix a process memory-maps and scans with one matrix
product (measured by scripts/bench_search.py, see its docstring). Reading the BLOB rows
back cost every `agent search` process 0.7 s at 100,000 messages (fetching 100,000 rows
and converting float16, which this numpy does slowly: 85-185 ms per 100,000 vectors);
mapping the matrix costs nothing, and the page cache keeps it between processes. float32,
not float16 or int8, because numpy has no fast product for those (float32 100,000 x 384:
12-20 ms; float16: 200 ms; int8 widened per chunk: 26-64 ms). sqlite-vec was the other
candidate; the Python here is built without loadable SQLite extensions
(`sqlite3.Connection.enable_load_extension` is missing), so it cannot run at all where
the project runs.

Keeping it current: triggers on `docs` queue every new document in `vec_pending` and
set the vector of a removed document aside in `vec_spare` under its text's hash, so a
file that is re-read (an edited MEMORY.md, a rebuilt history) gets its unchanged
documents' vectors back without running the model. `sync` embeds what is queued. The
model's name is in `meta`: another model re-embeds everything. The matrix file holds the
vectors up to a `seq` of `vec`; a search adds the rows made since from `vec`, and leaves
out the rows removed since, which a trigger lists in `vec_gone`; when those grow past a
hundredth of the file, the file is written again (under the index's write lock).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import sqlite3
import threading
from dataclasses import dataclass, replace

from agent.fs.signature import signature

BATCH = 64                    # documents per model call (and per commit while building)

_TABLES = (
    "CREATE TABLE IF NOT EXISTS vec(seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " id INTEGER UNIQUE NOT NULL, h INTEGER NOT NULL, v BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS vec_pending(id INTEGER PRIMARY KEY)",
    "CREATE TABLE IF NOT EXISTS vec_spare(h INTEGER PRIMARY KEY, v BLOB NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS vec_doc_added AFTER INSERT ON docs BEGIN"
    " INSERT OR IGNORE INTO vec_pending(id) VALUES (new.id); END",
    "CREATE TRIGGER IF NOT EXISTS vec_doc_removed AFTER DELETE ON docs BEGIN"
    " INSERT OR REPLACE INTO vec_spare(h, v) SELECT h, v FROM vec WHERE id = old.id;"
    " DELETE FROM vec WHERE id = old.id; DELETE FROM vec_pending WHERE id = old.id; END",
    # The matrix file leaves out what was removed after it was written.
    "CREATE TABLE IF NOT EXISTS vec_gone(seq INTEGER PRIMARY KEY)",
    "DROP TRIGGER IF EXISTS vec_removed",           # format 1 counted removals instead
    "CREATE TRIGGER IF NOT EXISTS vec_gone_add AFTER DELETE ON vec BEGIN"
    " INSERT OR IGNORE INTO vec_gone(seq) VALUES (old.seq); END",
)
FORMAT = "2"                  # of the vector tables and the matrix file


# What the model reads for a session message: the message before it too (its start),
# then the message itself. A reply ("Yes, the mountains last week!") says little alone;
# read with the question it answers, it is found by the question's meaning. Measured
# with scripts/eval_retrieval.py (hybrid rec@10 / any@10, with one neighbour shown per
# hit; the message alone -> with the one before it): tuning split 0.764 / 0.820 ->
# 0.788 / 0.859, held out 0.753 / 0.828 -> 0.765 / 0.836; dense alone 0.531 -> 0.617
# and 0.568 -> 0.598.
PREVIOUS_CHARS = 200
# What is embedded, by version: an index whose vectors were made otherwise makes them again.
PASSAGES = "2"


def text_of(text: str, speaker: str | None, topic: str | None,
            before: tuple[str, str | None] | None = None) -> str:
    """What the model reads for a document: who said it (or its heading) and the text,
    after the message before it (`before`: its text and speaker) for a session message."""
    head = speaker or topic
    own = f"{head}: {text}" if head else text
    if before is None:
        return own
    prev, who = before[0][:PREVIOUS_CHARS], before[1]
    return f"{who}: {prev}\n{own}" if who else f"{prev}\n{own}"


def _hash(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "big", signed=True)


def _meta(db, key):
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return row[0] if row else None


def enabled(db) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE name='vec'").fetchone() is not None


def model_of(db) -> str | None:
    """The model the stored vectors were made with, if any."""
    try:
        return _meta(db, "embed_model") if enabled(db) else None
    except sqlite3.DatabaseError:
        return None


def current(db, model_name: str) -> bool:
    """Whether the stored vectors are what `model_name` makes of the documents now."""
    return model_of(db) == model_name and _meta(db, "embed_passages") == PASSAGES


def ensure(db, model_name: str) -> None:
    """Vector tables and triggers in place for `model_name` (queues every document the
    first time, and again when the model changed)."""
    if current(db, model_name) and _meta(db, "vec_format") == FORMAT:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        for sql in _TABLES:
            db.execute(sql)
        again = _meta(db, "embed_model") != model_name or _meta(db, "embed_passages") != PASSAGES
        if again:
            db.execute("DELETE FROM vec")
            db.execute("DELETE FROM vec_spare")
            db.execute("INSERT OR IGNORE INTO vec_pending(id) SELECT id FROM docs")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('embed_model', ?)", (model_name,))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('embed_passages', ?)", (PASSAGES,))
        if again or _meta(db, "vec_format") != FORMAT:
            # A matrix file written before (another model, another way of reading the
            # documents, an older format, the vectors of a damaged index file this one
            # replaced) is never read for this set of vectors: a new epoch.
            db.execute("DELETE FROM vec_gone")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('vec_epoch', ?)", (os.urandom(8).hex(),))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('vec_format', ?)", (FORMAT,))
        db.execute("COMMIT")
    except BaseException:  # any: a failed batch is rolled back, then raised again
        db.execute("ROLLBACK")
        raise


def pending(db) -> int:
    if not enabled(db):
        return db.execute("SELECT count(*) FROM docs").fetchone()[0]
    return db.execute("SELECT count(*) FROM vec_pending").fetchone()[0]


def count(db) -> int:
    return db.execute("SELECT count(*) FROM vec").fetchone()[0] if enabled(db) else 0


def _queued(db, ids: list[int] | None = None, size: int = BATCH) -> list[tuple]:
    """The next `size` queued documents (or those of `ids` still queued) with what the
    model reads of each: (id, text, speaker, topic, text before, its speaker)."""
    where = f"WHERE p.id IN ({','.join('?' * len(ids))})" if ids is not None else ""
    return db.execute(
        "SELECT q.id, q.text, q.speaker, q.topic, b.text, b.speaker FROM"
        " (SELECT d.id, d.text, d.speaker, d.topic, CASE WHEN f.kind = 'sessions' THEN"
        "  (SELECT e.id FROM docs e WHERE e.file = d.file AND e.line < d.line"
        "   ORDER BY e.line DESC LIMIT 1) END AS prev"
        f"  FROM vec_pending p JOIN docs d ON d.id = p.id JOIN files f ON f.id = d.file {where}"
        "  ORDER BY p.id LIMIT ?) q LEFT JOIN docs b ON b.id = q.prev ORDER BY q.id",
        (*(ids or ()), size if ids is None else len(ids))).fetchall()


def _texts(rows: list[tuple]) -> list[str]:
    return [text_of(t, s, tp, None if bt is None else (bt, bs)) for _, t, s, tp, bt, bs in rows]


def sync(db, embedder, progress=None, limit: int | None = None, batch: int = BATCH) -> int:
    """Embed the queued documents (at most about `limit` of them: whole batches of
    `batch`); returns how many ran through the model.

    Commits per batch, so an interrupted build keeps what it did. `progress(done, total)`
    is called after each batch. The model runs outside any transaction (a batch takes
    a second or more, and a turn's search or save must not wait that long for the
    index's write lock, as it did while `agent serve` embedded an import); what it made
    is written under the lock for the documents still queued with the same text.
    """
    import numpy as np

    ensure(db, embedder.name)
    total = pending(db)
    done = embedded = 0
    if total == 0:
        db.execute("DELETE FROM vec_spare")
        return 0
    while True:
        rows = _queued(db, size=batch)
        if rows:
            texts = _texts(rows)
            hashes = [_hash(t) for t in texts]
            spare = dict(db.execute(
                f"SELECT h, v FROM vec_spare WHERE h IN ({','.join('?' * len(hashes))})", hashes))
            todo = [i for i, h in enumerate(hashes) if h not in spare]
            vecs = embedder.passages([texts[i] for i in todo]) if todo else None
            blobs = dict(spare)
            for j, i in enumerate(todo):
                blobs[hashes[i]] = vecs[j].astype(np.float16).tobytes()
        db.execute("BEGIN IMMEDIATE")
        try:
            if not rows:
                if _queued(db):            # queued meanwhile: another round
                    db.execute("COMMIT")
                    continue
                db.execute("DELETE FROM vec_pending")
                db.execute("DELETE FROM vec_spare")
                db.execute("COMMIT")
                break
            # Only what is still queued and reads the same (a file re-read meanwhile
            # queued its documents again, maybe with other words).
            again = _queued(db, [r[0] for r in rows])
            now = {r[0]: _hash(t) for r, t in zip(again, _texts(again))}
            keep = [(r[0], h) for r, h in zip(rows, hashes) if now.get(r[0]) == h]
            # Deleted first (not replaced) so that the trigger lists the old row as gone.
            db.executemany("DELETE FROM vec WHERE id = ?", [(i,) for i, _ in keep])
            db.executemany("INSERT INTO vec(id, h, v) VALUES (?, ?, ?)",
                           [(i, h, blobs[h]) for i, h in keep])
            db.executemany("DELETE FROM vec_pending WHERE id = ?", [(i,) for i, _ in keep])
            db.execute("COMMIT")
        except BaseException:  # any: a failed batch is rolled back, then raised again
            db.execute("ROLLBACK")
            raise
        done += len(rows)
        embedded += len(todo)
        if progress is not None:
            progress(min(done, total), total)
        if limit is not None and done >= limit:
            break
    if done:
        graphs(db, embedder.dim)
    return embedded


def graphs(db, dim: int) -> int:
    """Bring the nearest-neighbour graphs (ann.py) up to date when a segment is due:
    what makes vectors makes them, never a search that made none. Returns how many
    rows went into graphs."""
    from agent.search import ann

    key = db.execute("PRAGMA database_list").fetchone()[2]
    if not key:
        return 0
    segs = ann.read(key, _meta(db, "vec_epoch") or "", _meta(db, "embed_model") or "", dim)
    if segs is None and not os.path.isdir(ann.folder_of(key)):
        newest = db.execute("SELECT coalesce(max(seq), 0) FROM vec").fetchone()[0]
        if newest < ann.ANN_AT:         # fewer vectors than that: the scan serves
            return 0
    waiting = db.execute("SELECT count(*) FROM (SELECT 1 FROM vec WHERE seq > ? LIMIT ?)",
                         (segs.hi if segs else 0, ann.SEGMENT)).fetchone()[0]
    if waiting < ann.SEGMENT and segs is not None:
        return 0
    # Not under the index's write lock: building a large segment takes minutes, and a
    # turn must be able to add its messages meanwhile. One process at a time builds
    # (a lock file of the folder); another finds it taken and leaves the work to it.
    try:
        with ann.building(key) as mine:
            if not mine:
                return 0
            return ann.maintain(db, key, _meta(db, "vec_epoch") or "",
                                _meta(db, "embed_model") or "", dim)
    except OSError:
        return 0                    # a folder that cannot be written: the scan serves


# ---- searching ------------------------------------------------------------------------

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
    sig: tuple | None        # the file's stat when mapped (None: no file)
    epoch: str
    dim: int
    seqs: object             # int64[n]: vec.seq of each row of the file, ascending
    ids: object              # int64[n]
    m: object                # float32[n, dim], memory-mapped
    file_seq: int            # the newest seq the file holds
    seq: int                 # the newest seq held: the file's, then what was added
    top_seqs: list
    top_ids: list
    top: list                # float32 [k, dim] blocks added from `vec` since the file
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
    mapped = getattr(m, "_mmap", None)      # numpy's own mmap of the file, if m is mapped
    for i in range(lo, hi, BLOCK):
        j = min(i + BLOCK, hi)
        out[i - lo:j - lo] = m[i:j] @ q
        if mapped is not None:
            _let_go(m, mapped, i, j)
    return out


def _let_go(m, mapped, i: int, j: int) -> None:
    """Drop rows i..j of the mapped matrix from this process's memory (MADV_DONTNEED: a
    file mapped read-only is read again from the page cache if touched again)."""
    import mmap
    row = m.shape[1] * m.itemsize
    skew = m.offset % mmap.ALLOCATIONGRANULARITY   # where numpy's mapping starts the matrix
    start, end = skew + i * row, skew + j * row
    start -= start % mmap.PAGESIZE
    if hasattr(mapped, "madvise") and end > start:
        mapped.madvise(mmap.MADV_DONTNEED, start, end - start)


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
        epoch = h.get("epoch") if epoch is None else epoch
        if (h.get("format") != FORMAT or h.get("epoch") != epoch
                or (model is not None and h.get("model") != model)
                or int(h.get("dim", -1)) != dim or sig[1] != HEADER + n * 16 + n * dim * 4):
            return None
        if n == 0:
            out = _empty(epoch, dim, sig)
        else:
            seqs = np.fromfile(path, dtype="<i8", count=n, offset=HEADER)
            ids = np.fromfile(path, dtype="<i8", count=n, offset=HEADER + n * 8)
            m = np.memmap(path, dtype=_F32, mode="r", offset=HEADER + n * 16, shape=(n, dim))
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
            if keep is not None:
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
        epoch, model = _meta(db, "vec_epoch"), _meta(db, "embed_model")
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

    segs = ann.read(key, _meta(db, "vec_epoch") or "", _meta(db, "embed_model") or "", dim)
    with _CACHING:
        _top_up(db, key, dim, segs.hi if segs else 0)


def _top_up(db, key: str, dim: int, floor: int) -> _Matrix:
    import numpy as np

    epoch, model = _meta(db, "vec_epoch") or "", _meta(db, "embed_model") or ""
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


def of(db, ids: list[int]):
    """The stored vectors of these documents, as (ids found, float32 [n, dim])."""
    import numpy as np
    if not ids or not enabled(db):
        return [], None
    rows = db.execute(f"SELECT id, v FROM vec WHERE id IN ({','.join('?' * len(ids))})",
                      list(ids)).fetchall()
    if not rows:
        return [], None
    m = np.frombuffer(b"".join(r[1] for r in rows), np.float16).astype(_F32)
    return [r[0] for r in rows], m.reshape(len(rows), -1)


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
    segs = ann.read(key, _meta(db, "vec_epoch") or "", _meta(db, "embed_model") or "", dim)
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
