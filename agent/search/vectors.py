"""Document vectors for dense retrieval, kept in the derived index beside the FTS tables.

Storage: one float16 BLOB per document in `vec` of `.agent/index.sqlite` (what the
index's transactions keep current); beside it the same vectors as one float32 matrix
file a search memory-maps and scans (agent.search.matrix says why and how).

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


def meta(db, key):
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return row[0] if row else None


def enabled(db) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE name='vec'").fetchone() is not None


def model_of(db) -> str | None:
    """The model the stored vectors were made with, if any."""
    try:
        return meta(db, "embed_model") if enabled(db) else None
    except sqlite3.DatabaseError:
        return None


def current(db, model_name: str) -> bool:
    """Whether the stored vectors are what `model_name` makes of the documents now."""
    return model_of(db) == model_name and meta(db, "embed_passages") == PASSAGES


def ensure(db, model_name: str) -> None:
    """Vector tables and triggers in place for `model_name` (queues every document the
    first time, and again when the model changed)."""
    if current(db, model_name) and meta(db, "vec_format") == FORMAT:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        for sql in _TABLES:
            db.execute(sql)
        again = meta(db, "embed_model") != model_name or meta(db, "embed_passages") != PASSAGES
        if again:
            db.execute("DELETE FROM vec")
            db.execute("DELETE FROM vec_spare")
            db.execute("INSERT OR IGNORE INTO vec_pending(id) SELECT id FROM docs")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('embed_model', ?)", (model_name,))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('embed_passages', ?)", (PASSAGES,))
        if again or meta(db, "vec_format") != FORMAT:
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


def of(db, ids: list[int]):
    """The stored vectors of these documents, as (ids found, float32 [n, dim])."""
    import numpy as np
    if not ids or not enabled(db):
        return [], None
    rows = db.execute(f"SELECT id, v FROM vec WHERE id IN ({','.join('?' * len(ids))})",
                      list(ids)).fetchall()
    if not rows:
        return [], None
    m = np.frombuffer(b"".join(r[1] for r in rows), np.float16).astype("<f4")
    return [r[0] for r in rows], m.reshape(len(rows), -1)


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
            vecs = embedder.passages([texts[i] for i in todo]) if todo else []
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
    segs = ann.read(key, meta(db, "vec_epoch") or "", meta(db, "embed_model") or "", dim)
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
            return ann.maintain(db, key, meta(db, "vec_epoch") or "",
                                meta(db, "embed_model") or "", dim)
    except OSError:
        return 0                    # a folder that cannot be written: the scan serves
