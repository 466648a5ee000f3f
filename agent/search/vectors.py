"""Document vectors for dense retrieval, kept in the derived index beside the FTS tables.

Storage (measured by scripts/bench_search.py, see its docstring): one float16 BLOB per
document in `vec` of `.agent/index.sqlite`, searched by a float32 matrix product in
numpy that each process caches and tops up incrementally. sqlite-vec was the other
candidate; the Python here is built without loadable SQLite extensions
(`sqlite3.Connection.enable_load_extension` is missing), so it cannot run at all where
the project runs, and brute force in numpy is fast enough (about 20 ms for 100,000
vectors of 384 dimensions on one core).

Keeping it current: triggers on `docs` queue every new document in `vec_pending` and
set the vector of a removed document aside in `vec_spare` under its text's hash, so a
file that is re-read (an edited MEMORY.md, a rebuilt history) gets its unchanged
documents' vectors back without running the model. `sync` embeds what is queued. The
model's name is in `meta`: another model re-embeds everything.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from dataclasses import dataclass

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
    # A removed vector invalidates the matrices processes cache; additions only extend them.
    "CREATE TRIGGER IF NOT EXISTS vec_removed AFTER DELETE ON vec BEGIN"
    " UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'vec_gen'; END",
)


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
    if current(db, model_name):
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        for sql in _TABLES:
            db.execute(sql)
        if _meta(db, "embed_model") != model_name or _meta(db, "embed_passages") != PASSAGES:
            db.execute("DELETE FROM vec")
            db.execute("DELETE FROM vec_spare")
            db.execute("INSERT OR IGNORE INTO vec_pending(id) SELECT id FROM docs")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('embed_model', ?)", (model_name,))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('embed_passages', ?)", (PASSAGES,))
            # A new set of vectors (or a new index file in place of a damaged one) must
            # never be read through a process's matrix of the old one: a new generation.
            db.execute("INSERT OR REPLACE INTO meta VALUES ('vec_gen', ?)",
                       (str(int.from_bytes(os.urandom(6), "big")),))
        db.execute("INSERT OR IGNORE INTO meta VALUES ('vec_gen', '0')")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def pending(db) -> int:
    if not enabled(db):
        return db.execute("SELECT count(*) FROM docs").fetchone()[0]
    return db.execute("SELECT count(*) FROM vec_pending").fetchone()[0]


def count(db) -> int:
    return db.execute("SELECT count(*) FROM vec").fetchone()[0] if enabled(db) else 0


def sync(db, embedder, progress=None, limit: int | None = None) -> int:
    """Embed the queued documents (at most about `limit` of them); returns how many ran
    through the model.

    Commits per batch, so an interrupted build keeps what it did. `progress(done, total)`
    is called after each batch.
    """
    import numpy as np

    ensure(db, embedder.name)
    total = pending(db)
    done = embedded = 0
    if total == 0:
        db.execute("DELETE FROM vec_spare")
        return 0
    while True:
        db.execute("BEGIN IMMEDIATE")
        try:
            rows = db.execute(
                "SELECT q.id, q.text, q.speaker, q.topic, b.text, b.speaker FROM"
                " (SELECT d.id, d.text, d.speaker, d.topic, CASE WHEN f.kind = 'sessions' THEN"
                "  (SELECT e.id FROM docs e WHERE e.file = d.file AND e.line < d.line"
                "   ORDER BY e.line DESC LIMIT 1) END AS prev"
                "  FROM vec_pending p JOIN docs d ON d.id = p.id JOIN files f ON f.id = d.file"
                "  ORDER BY p.id LIMIT ?) q LEFT JOIN docs b ON b.id = q.prev ORDER BY q.id",
                (BATCH,)).fetchall()
            if not rows:
                db.execute("DELETE FROM vec_pending")
                db.execute("DELETE FROM vec_spare")
                db.execute("COMMIT")
                break
            texts = [text_of(t, s, tp, None if bt is None else (bt, bs))
                     for _, t, s, tp, bt, bs in rows]
            hashes = [_hash(t) for t in texts]
            spare = dict(db.execute(
                f"SELECT h, v FROM vec_spare WHERE h IN ({','.join('?' * len(hashes))})", hashes))
            todo = [i for i, h in enumerate(hashes) if h not in spare]
            vecs = embedder.passages([texts[i] for i in todo]) if todo else None
            blobs = dict(spare)
            for j, i in enumerate(todo):
                blobs[hashes[i]] = vecs[j].astype(np.float16).tobytes()
            db.executemany("INSERT OR REPLACE INTO vec(id, h, v) VALUES (?, ?, ?)",
                           [(r[0], h, blobs[h]) for r, h in zip(rows, hashes)])
            db.executemany("DELETE FROM vec_pending WHERE id = ?", [(r[0],) for r in rows])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        done += len(rows)
        embedded += len(todo)
        if progress is not None:
            progress(min(done, total), total)
        if limit is not None and done >= limit:
            break
    return embedded


# ---- searching ------------------------------------------------------------------------

@dataclass
class _Matrix:
    gen: str
    seq: int
    n: int
    ids: object          # int64[capacity]
    m: object            # float32[capacity, dim]


_CACHE: dict[str, _Matrix] = {}


def _load(db, key: str, dim: int) -> _Matrix:
    """This process's matrix of the index's vectors, topped up with what was added."""
    import numpy as np

    gen = _meta(db, "vec_gen") or "0"
    cached = _CACHE.get(key)
    if cached is None or cached.gen != gen or cached.m.shape[1] != dim:
        cached = _Matrix(gen, 0, 0, np.zeros(0, np.int64), np.zeros((0, dim), np.float32))
    rows = db.execute("SELECT seq, id, v FROM vec WHERE seq > ? ORDER BY seq", (cached.seq,)).fetchall()
    if rows:
        need = cached.n + len(rows)
        if need > len(cached.ids):
            cap = max(need, int(len(cached.ids) * 1.5) + 1024)
            ids = np.zeros(cap, np.int64)
            m = np.zeros((cap, dim), np.float32)
            ids[:cached.n] = cached.ids[:cached.n]
            m[:cached.n] = cached.m[:cached.n]
            cached.ids, cached.m = ids, m
        new = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float16).reshape(len(rows), dim)
        cached.m[cached.n:need] = new
        cached.ids[cached.n:need] = [r[1] for r in rows]
        cached.n, cached.seq = need, rows[-1][0]
    _CACHE[key] = cached
    return cached


def nearest(db, key: str, qvec, k: int) -> tuple[list[tuple[int, float]], float]:
    """The k documents closest to the query vector, as (doc id, cosine similarity), and
    the mean similarity of all documents to it (what "unrelated" is for this query)."""
    import numpy as np

    mat = _load(db, key, qvec.shape[0])
    if mat.n == 0 or k <= 0:
        return [], 0.0
    scores = mat.m[:mat.n] @ qvec
    mean = float(scores.mean())
    k = min(k, mat.n)
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    return [(int(mat.ids[i]), float(scores[i])) for i in top], mean
