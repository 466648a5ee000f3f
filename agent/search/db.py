"""The search index's database: `.agent/index.sqlite`, its schema, and opening it.

The index is derived: a file of another schema, a damaged one, or one that is missing is
made again (empty) when opened, and agent.search.update fills it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import unicodedata
from pathlib import Path

from agent.errors import UserError
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

DB_NAME = "index.sqlite"
SCHEMA = 3


class SearchError(UserError):
    """A search that cannot be made as asked; the message says why."""


def db_path(vault: Vault) -> Path:
    return vault.state / DB_NAME


def drop(state: Path) -> None:
    """Delete the index and the files beside it (its vectors, SQLite's journals) from the
    vault's state folder `state`: the cleanup search registers with the vault's layout
    (agent.ops.vaults), run after a history rewrite; the next search rebuilds them."""
    for f in state.glob(DB_NAME + "*"):
        f.unlink(missing_ok=True)


def _create(db: sqlite3.Connection) -> None:
    # FTS5 keeps no copy of the text (contentless): the display text is in `docs`, and a
    # row leaves the full-text index by the 'delete' command given its words again,
    # which agent.search.update recomputes from `docs` (the unicode version is pinned in meta).
    fts = "CREATE VIRTUAL TABLE fts USING fts5(body, content='', tokenize='porter ascii')"
    for sql in (
        "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)",
        "CREATE TABLE files(id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, kind TEXT NOT NULL,"
        " session TEXT, size INTEGER, mtime INTEGER, lines INTEGER, tail TEXT, problem TEXT,"
        " messages INTEGER NOT NULL DEFAULT 0)",
        "CREATE TABLE docs(id INTEGER PRIMARY KEY, file INTEGER NOT NULL, line INTEGER,"
        " ts TEXT, speaker TEXT, msg TEXT, weight REAL, covers TEXT, topic TEXT,"
        " text TEXT NOT NULL)",
        "CREATE INDEX docs_file ON docs(file, line)",
        fts,
    ):
        db.execute(sql)
    db.executemany("INSERT INTO meta VALUES (?, ?)", list(_identity().items()))


def _identity() -> dict[str, str]:
    """What an index must have been built with to be used as it is."""
    return {"schema": str(SCHEMA), "backend": "fts5", "unicode": unicodedata.unidata_version}


def connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def meta(db, key):
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return row[0] if row else None


def set_meta(db, key, value):
    if meta(db, key) != value:
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))


def remove_db(path: Path) -> None:
    import shutil
    for suffix in ("", "-wal", "-shm", "-journal", "-vectors"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
    shutil.rmtree(f"{path}-ann", ignore_errors=True)      # the graphs (agent/search/ann.py)


# One thread of a process at a time opens and checks the index. SQLite's locks belong
# to the process, not the thread, so threads that made a new index at once (`agent
# serve` running two conversations' first turns) could each take it for damaged and
# remove it under the other: "no such table: meta", "database disk image is malformed",
# and a crash of the whole process (SIGBUS) in the WAL's shared memory.
_OPENING = threading.Lock()
_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL}


@contextlib.contextmanager
def open_index(vault: Vault):
    """A connection to an index of the right schema (made empty if missing or unusable)."""
    path = db_path(vault)
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    with _OPENING:
        for attempt in (1, 2, 3):
            db = None
            try:
                db = connect(path)
                if db.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
                    if all(meta(db, k) == v for k, v in _identity().items()):
                        break
                elif not db.execute("SELECT 1 FROM sqlite_master").fetchone():
                    db.execute("BEGIN IMMEDIATE")
                    if not db.execute("SELECT 1 FROM sqlite_master").fetchone():
                        _create(db)
                    db.execute("COMMIT")
                    break
            except sqlite3.DatabaseError as e:
                if db is not None:
                    db.close()
                if attempt == 3:
                    raise
                if (getattr(e, "sqlite_errorcode", 0) & 0xFF) in _BUSY:
                    # Another process at work on it is no sign of damage: once more.
                    time.sleep(0.1)
                    continue
                remove_db(path)        # a damaged file: it is derived, start over
                continue
            # An index from another version: start over.
            db.close()
            remove_db(path)
        else:
            raise SearchError(f"the search index {path} could not be made; remove it and "
                              "search again")
    try:
        yield db
    finally:
        db.close()
