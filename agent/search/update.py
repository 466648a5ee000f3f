"""Keeping the search index current: what a turn changed, not what the vault holds.

The index records the commit it reflects; `refresh` asks git which files changed since
then (committed or not), re-reads only those, and for a session file that only grew
reads just the new bytes. Each file is opened once, through the safe reader
(agent.fs.safe): what is checked is what is read.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from agent import clock
try:
    # CPython's own SHA-1: the same digests as hashlib's, without loading OpenSSL, which
    # costs the refresh after a sync or a note more than all its hashing.
    from _sha1 import sha1
except ImportError:             # another Python
    from hashlib import sha1
from agent.errors import UserError
from agent.search.db import SearchError, db_path, meta, open_index, set_meta
from agent.search.documents import (Doc, archive_doc, kind_of, memory_docs, message_doc,
                                    note_docs, walk)
from agent.search.text import tokens
from agent.stores import sessions
from agent.fs import safe
from agent.vault.gitstate import head_from_files
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vault.repo import Vault


class Stats:
    """What an update read (a plain class: a dataclass's generated methods would cost
    the refresh after every sync more than its work on a turn's lines)."""

    def __init__(self) -> None:
        self.files = self.docs = 0
        self.full = False
        self.dense: object = None       # rebuild: the Dense it ran with


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


def _drop_docs(db, file_id: int, after_line: int = 0) -> None:
    """Take the file's documents (those after line `after_line`) out of the index."""
    cond, args = (" AND line > ?", (after_line,)) if after_line else ("", ())
    rows = db.execute(f"SELECT id, text, topic FROM docs WHERE file=?{cond}",
                      (file_id, *args)).fetchall()
    db.executemany("INSERT INTO fts(fts, rowid, body) VALUES ('delete', ?, ?)",
                   [(i, _body(text, topic)) for i, text, topic in rows])
    db.execute(f"DELETE FROM docs WHERE file=?{cond}", (file_id, *args))


def _read(fd: int, start: int, size: int) -> bytes:
    """`size` bytes of the open file from `start` (fewer if it ends sooner)."""
    parts, got = [], 0
    while got < size:
        chunk = os.pread(fd, size - got, start + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


# What `tail` records of a session file: its inode and a digest of the last JOIN_BYTES
# indexed. The file grew, on the same inode, with those bytes unchanged: it was
# appended to, and only the new bytes are read (a month's file is read once, not at
# every turn). Anything else (a rewrite: an editor's save, a checkout, a sync's merge,
# an edit that changed an earlier line's length) reads the whole file, and the documents
# of its unchanged first lines are kept (their vectors too). An edit in place that keeps
# an earlier line's length and is followed by an append before the next refresh is the
# one change this does not see; the file's next rewrite does.
JOIN_BYTES = 4096


def _tail(st, before: bytes) -> str:
    return f"end:{st.st_ino}:" + sha1(before[-JOIN_BYTES:]).hexdigest()


def _lines(data: bytes, line_no: int) -> tuple[list[Doc], int, int]:
    """(documents, lines, messages) of whole JSONL lines `data`, numbered after `line_no`."""
    docs, messages = [], 0
    for raw in data.split(b"\n")[:-1] if data else []:
        line_no += 1
        if raw.strip():
            if b'"role"' in raw and b'"type":"compact"' not in raw:
                messages += 1        # every message, with text or not (status counts them)
            d = message_doc(line_no, raw)
            if d is not None:
                docs.append(d)
    return docs, line_no, messages


def _kept_lines(db, file_id: int, docs: list[Doc]) -> int:
    """The line up to which the file's documents in the index equal `docs` (what a
    rewrite left as it was)."""
    fields = "line, ts, speaker, msg, weight, covers, topic, text"
    old = db.execute(f"SELECT {fields} FROM docs WHERE file=? ORDER BY line", (file_id,))
    kept = 0
    for d, row in zip(docs, old):
        if (d.line, d.ts, d.speaker, d.msg, d.weight, d.covers, d.topic, d.text) != tuple(row):
            break
        kept = d.line
    return kept


def _index_session(db, fd: int, rel: str, st, row) -> int:
    """Index the lines of a session file not indexed yet: the new bytes of an appended
    file, else every line, keeping the documents of the lines that did not change."""
    file_id = row["id"] if row is not None else _file_id(db, rel, "sessions")
    old = row["size"] if row is not None and row["size"] else 0
    appended = False
    if old and st.st_size > old and row["tail"]:
        join = max(0, old - JOIN_BYTES)
        appended = _tail(st, _read(fd, join, old - join)) == row["tail"]
    start = old if appended else 0
    data = _read(fd, start, st.st_size - start)
    end = start + data.rfind(b"\n") + 1      # a torn last line waits until it is whole
    docs, line_no, messages = _lines(data[:end - start], row["lines"] if appended else 0)
    if appended:
        messages += row["messages"]
    elif row is not None:
        kept = _kept_lines(db, file_id, docs)
        _drop_docs(db, file_id, kept)
        docs = [d for d in docs if d.line > kept]
    _insert(db, file_id, docs)
    size = max(end, start)
    before = data[:size - start] if appended else data[:size]
    if appended and len(before) < JOIN_BYTES:
        join = max(0, size - JOIN_BYTES)
        before = _read(fd, join, size - join)
    db.execute("UPDATE files SET size=?, mtime=?, lines=?, tail=?, messages=? WHERE id=?",
               (size, st.st_mtime_ns, line_no, _tail(st, before), messages, file_id))
    return len(docs)


def _index_text_file(db, fd: int, rel: str, kind: str, st, row) -> int:
    data = _read(fd, 0, min(st.st_size, safe.MAX_BYTES))
    digest = sha1(data).hexdigest()
    if row is not None and row["tail"] == digest:
        db.execute("UPDATE files SET size=?, mtime=? WHERE id=?", (st.st_size, st.st_mtime_ns, row["id"]))
        return 0
    file_id = row["id"] if row is not None else _file_id(db, rel, kind)
    if row is not None:
        _drop_docs(db, file_id)
    # A bad byte is read as U+FFFD and named (file, line, byte) by every search after.
    bad: list[str] = []
    text = safe.decode(data, rel, errors="replace", warnings=bad)
    problem = bad[0] if bad else None
    if kind == "memory":
        docs = memory_docs(rel, text)
    elif kind == "notes":
        docs = note_docs(rel, text)
    else:
        doc, problem = archive_doc(rel, data)
        docs = [doc] if doc else []
    _insert(db, file_id, docs)
    db.execute("UPDATE files SET size=?, mtime=?, tail=?, problem=? WHERE id=?",
               (st.st_size, st.st_mtime_ns, digest, problem, file_id))
    return len(docs)


def _open_file(root: Path, rel: str, kind: str):
    """(descriptor, stat) of the file when the index may read it (agent.fs.safe's
    rule: a regular file inside the vault, within the size limit), else None: it is
    left unindexed. The caller reads that descriptor, never the path again."""
    limit = sessions.SESSION_BYTES if kind == "sessions" else safe.MAX_BYTES
    try:
        fd, _ = safe.open_file(root, rel, limit=limit)
    except (FileNotFoundError, UserError):
        return None
    return fd, os.fstat(fd)


def _index_path(db, root: Path, rel: str) -> int:
    kind = kind_of(rel)
    opened = _open_file(root, rel, kind) if kind is not None else None
    row = db.execute("SELECT * FROM files WHERE path=?", (rel,)).fetchone()
    if opened is None:
        if row is not None:
            _drop_docs(db, row["id"])
            db.execute("DELETE FROM files WHERE id=?", (row["id"],))
        return 0
    fd, st = opened
    try:
        if row is not None and row["size"] == st.st_size and row["mtime"] == st.st_mtime_ns:
            return 0
        if kind == "sessions":
            return _index_session(db, fd, rel, st, row)
        return _index_text_file(db, fd, rel, kind, st, row)
    finally:
        os.close(fd)


def changed_paths(vault: Vault, since: str, head: str | None, clean: bool = False,
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
        from agent.vault import history      # only when the caller did not say
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


def _take_record(vault: Vault) -> dict | None:
    """What the tree looks like now (taken before `git status` runs), or None."""
    start = time.time_ns()
    head = head_from_files(vault.root)
    listed = _watch_list(vault.root) if head else None
    if listed is None:
        return None
    dirs, files = listed
    sigs = _stat_all(vault.root, dirs + files)
    if any(s is not None and max(s[1], s[2]) >= start - RACY_NS for s in sigs):
        return None
    return {"head": head, "paths": dirs + files, "sigs": sigs}


def _unchanged(vault: Vault, db) -> bool:
    """Whether the tree is as the last update that asked git recorded it (then the index
    is up to date without asking git again)."""
    raw = meta(db, "seen")
    if not raw:
        return False
    try:
        rec = json.loads(raw)
    except ValueError:
        return False
    if (not isinstance(rec, dict) or not isinstance(rec.get("paths"), list)
            or not all(isinstance(p, str) for p in rec["paths"])):
        return False                    # written by another version: asked again
    if rec.get("head") != head_from_files(vault.root) or rec.get("commit") != meta(db, "commit"):
        return False
    return _stat_all(vault.root, rec["paths"]) == rec.get("sigs")


def update(vault: Vault, db, full: bool = False, after_commit: bool = False,
            dirty: list[str] | None = None,
            moved: tuple[str, str, list[str]] | None = None) -> Stats:
    stats = Stats()
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
        last = moved if moved is not None else vault.last_commit if after_commit else None
        asking = not after_commit and dirty is None      # git is asked about the tree
        # Right after the caller's commit, HEAD is that commit (or a later one, which
        # the next refresh catches up with from here).
        head = last[1] if last is not None else vault.head()
        # A record pays for its walk only when searches follow one another at one HEAD
        # (the MCP server, the command line): a turn's search comes after the last turn's
        # commit, which makes any record stale, so none is taken for it. Taken before git
        # is asked: an edit after this shows in the next comparison.
        record = _take_record(vault) if asking and meta(db, "asked") == (head or "") else None
        indexed = meta(db, "commit")
        changes = (changed_paths(vault, indexed, head, after_commit, dirty, last)
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
            before = json.loads(meta(db, "dirty") or "[]")
            paths = sorted(changed.union(before))
        for rel in paths:
            stats.docs += _index_path(db, vault.root, rel)
        stats.files, stats.full = len(paths), full
        set_meta(db, "commit", head or "")
        set_meta(db, "dirty", json.dumps(sorted(p for p in dirty if kind_of(p))))
        if full:
            set_meta(db, "built", clock.now().isoformat(timespec="seconds"))
        if asking:
            set_meta(db, "asked", head or "")
            if record is not None:
                record["commit"] = head or ""
            set_meta(db, "seen", json.dumps(record, separators=(",", ":")) if record else "")
        db.execute("COMMIT")
    except BaseException:  # any: rolled back, then raised again
        db.execute("ROLLBACK")
        raise
    finally:
        db.row_factory = None
    return stats


def refresh(vault: Vault, *, after_commit: bool = False, dirty: list[str] | None = None,
            moved: tuple[str, str, list[str]] | None = None) -> Stats:
    """Bring the index up to date with the vault's files (cheap when little changed).

    `after_commit=True` right after the caller's own commit saves a `git status`, and so
    does `dirty`, the uncommitted paths when the caller has just asked git for them.
    `moved` is how HEAD moved when the caller knows every path it changed (a sync's
    `SyncResult.moved`: from, to, paths), so git is not asked for the difference.
    Words only: the new documents' vectors stay queued (the index's triggers queue
    them) for the next search to make (or `vectors`), so a turn ends, and `agent
    status` counts, without running the embedding model (two model calls for a turn,
    40-80 ms each on a busy two-core machine).
    """
    with open_index(vault) as db:
        return update(vault, db, after_commit=after_commit, dirty=dirty, moved=moved)


