"""Memory search: a derived SQLite full-text index of the vault, and the search on it.

The index lives in `.agent/index.sqlite` and can be deleted at any time: the next
search rebuilds it. Its documents come from documents.py (each file read through its
store), their words from text.py (normalised in Python before SQLite sees them);
SQLite FTS5's porter tokenizer then stems and its bm25() ranks, and ranking.py
re-ranks the candidates; snippets.py marks the matches.

FTS4 ranked by the `sqlite-fts4` package, the design's first choice, was measured and
dropped: it ranks in Python, row by row, so at 100,000 messages a common-word query
took 54.2 ms at p95 against 16.2 ms for FTS5, with the same rec@10.

This module is the index's face to the rest of the agent: `search` (query.py), `refresh`
and `rebuild` (update.py, keeping it current at the cost of what a turn changes, not
what the vault holds), `status` and the sessions it knows; the database itself is db.py.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from agent.search.db import (DB_NAME, SCHEMA, SearchError, connect, db_path, meta,
                             open_index, remove_db)
from agent.search.documents import kind_of
from agent.search import query
from agent.search.query import (JSON_TEXT, KINDS, LAST, MODES, SEARCH_EMBED_BUDGET,
                                Dense, Hit, dense_for, search)
from agent.search.ranking import RANKING
from agent.search.text import query_terms
from agent.search.update import (RACY_NS, WATCH_LIMIT, Stats, changed_paths,
                                 refresh, update)
from agent.vault import history
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault

# Names tests and scripts reach for (agent.search.db's own).
_connect, _remove_db = connect, remove_db

__all__ = ["DB_NAME", "SCHEMA", "JSON_TEXT", "KINDS", "LAST", "MODES", "RACY_NS", "RANKING",
           "SEARCH_EMBED_BUDGET", "WATCH_LIMIT", "Dense", "Hit", "SearchError", "SessionSummary",
           "Stats", "Status", "db_path", "message_counts", "query_terms", "rebuild", "refresh",
           "search", "session_summaries", "status", "vectors_now", "vectors_waiting"]


def vectors_now(vault: Vault, limit: int | None = None, batch: int | None = None) -> Dense:
    """Make the queued vectors now (every one, or about `limit`: serve's slice, in model
    calls of `batch` documents), as the next search would (the embedding model, or why
    search runs on words alone)."""
    from agent.search import matrix
    with open_index(vault) as db:
        dense = (dense_for(db, everything=True, batch=batch) if limit is None else
                 dense_for(db, limit=limit, batch=batch))
        if dense.embedder is not None:
            matrix.prepare(db, str(db_path(vault)), dense.embedder.dim)
        return dense


def vectors_waiting(vault: Vault) -> int:
    """How many documents wait for their vectors (0 without the embed extra; every
    document when none was ever embedded)."""
    from agent.search import embed, vectors

    if embed.wanted() == "off" or not embed.installed():
        return 0
    with open_index(vault) as db:
        return vectors.pending(db)


def rebuild(vault: Vault) -> Stats:
    """Build the index again from every file of the vault."""
    remove_db(db_path(vault))
    with open_index(vault) as db:
        stats = update(vault, db, full=True)
        stats.dense = dense_for(db, everything=True)
        return stats


@dataclass
class Status:
    path: Path
    exists: bool
    backend: str = "fts5"
    commit: str | None = None
    head: str | None = None
    built: str | None = None
    documents: dict = field(default_factory=dict)
    size: int = 0
    commits_behind: int | None = None
    files_behind: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    mode: str = "words alone"


def _mode_line(db) -> str:
    """Which search runs: words alone (and why) or words and meaning (and how far along)."""
    from agent.search import embed, vectors
    if embed.wanted() == "off":
        return f"words alone ({embed.ENV}=off)"
    if not embed.installed():
        return "words alone (for meaning too: pip install -e '.[embed]')"
    try:
        emb = embed.load()
    except embed.EmbedUnavailable as e:
        return f"words alone: {e}; {embed.FIX}"
    if emb is None:                      # turned off meanwhile
        return f"words alone ({embed.ENV}=off)"
    if db is None or not vectors.current(db, emb.name):
        return f"words and meaning ({emb.name}; vectors made at the next search)"
    n, todo = vectors.count(db), vectors.pending(db)
    return (f"words and meaning ({emb.name}; {n} vectors"
            + (f", {todo} waiting for the next search" if todo else "") + ")"
            + (f"; each search makes {query.SEARCH_EMBED_BUDGET}, `agent index rebuild` makes "
               f"them all" if todo > query.SEARCH_EMBED_BUDGET else ""))


def status(vault: Vault) -> Status:
    """What the index holds and how far behind the vault it is (without updating it)."""
    path = db_path(vault)
    st = Status(path, path.exists(), head=vault.head())
    if not st.exists:
        st.mode = _mode_line(None)
        return st
    st.size = sum(os.path.getsize(f"{path}{s}") for s in ("", "-wal", "-vectors")
                  if os.path.exists(f"{path}{s}"))
    db = connect(path)
    try:
        try:
            st.commit = meta(db, "commit") or None
            st.backend = meta(db, "backend") or "?"
            st.built = meta(db, "built")
            st.documents = dict(db.execute(
                "SELECT f.kind, count(*) FROM docs d JOIN files f ON f.id = d.file GROUP BY f.kind"))
            st.problems = [r[0] for r in db.execute("SELECT problem FROM files WHERE problem IS NOT NULL")]
            dirty_before = json.loads(meta(db, "dirty") or "[]")
            st.mode = _mode_line(db)
        except sqlite3.DatabaseError:
            st.exists = False
            return st
        if st.commit and st.head and st.commit != st.head:
            st.commits_behind = history.count_between(vault, st.commit, st.head)
        else:
            st.commits_behind = 0
        changes = changed_paths(vault, st.commit, st.head) if st.commit else None
        if changes is not None:
            for rel in sorted(changes[0].union(dirty_before)):
                row = db.execute("SELECT size, mtime FROM files WHERE path=?", (rel,)).fetchone()
                try:
                    s = (vault.root / rel).stat()
                    now = (s.st_size, s.st_mtime_ns)
                except OSError:
                    now = None
                if row is None and (now is None or kind_of(rel) is None):
                    continue
                if row is None or now is None or tuple(row) != now:
                    st.files_behind.append(rel)
    finally:
        db.close()
    return st


@dataclass
class SessionSummary:
    key: str
    messages: int           # every message line (text or tool calls), markers left out
    first: str | None       # ts of the first and last message with text
    last: str | None
    last_text: str          # the last message with text
    last_speaker: str | None
    path: str               # the newest file


def session_summaries(vault: Vault) -> list[SessionSummary]:
    """Every session the index knows (brought up to date first), most recent first."""
    refresh(vault)
    out = []
    with open_index(vault) as db:
        rows = db.execute(
            "SELECT f.session, sum(f.messages), max(f.path), "
            " (SELECT min(d.ts) FROM docs d JOIN files g ON g.id = d.file WHERE g.session = f.session),"
            " (SELECT max(d.ts) FROM docs d JOIN files g ON g.id = d.file WHERE g.session = f.session)"
            " FROM files f WHERE f.kind = 'sessions' GROUP BY f.session").fetchall()
        for key, messages, path, first, last in rows:
            row = db.execute(
                "SELECT d.text, d.speaker FROM docs d JOIN files f ON f.id = d.file "
                "WHERE f.session = ? ORDER BY f.path DESC, d.line DESC LIMIT 1", (key,)).fetchone()
            out.append(SessionSummary(key, messages or 0, first, last,
                                      row[0] if row else "", row[1] if row else None, path))
    out.sort(key=lambda s: (s.last or "", s.key), reverse=True)
    return out


def message_counts(vault: Vault, dirty: list[str] | None = None) -> tuple[int, int]:
    """(sessions, messages) from the index, brought up to date first: a cost that does
    not grow with history, unlike reading every transcript. `dirty` as for `refresh`."""
    refresh(vault, dirty=dirty)
    with open_index(vault) as db:
        row = db.execute("SELECT count(DISTINCT session), coalesce(sum(messages), 0) FROM files "
                         "WHERE kind = 'sessions'").fetchone()
    return row[0], row[1]
