"""Memory search: a derived SQLite full-text index of the vault, and the search on it.

The index lives in `.agent/index.sqlite` and can be deleted at any time: the next
search rebuilds it. One document per session message, per bullet of `MEMORY.md` and
`USER.md`, per line of a daily note, per archive entry (topic and summary). The text is
normalised in Python before SQLite sees it (case, accents, apostrophes, and runs of
Chinese/Japanese/Korean characters cut into overlapping bigrams, because the SQLite
tokenizers keep a CJK run as one token and a two-character word inside a sentence
would never be found); SQLite FTS5's porter tokenizer then stems and its bm25()
ranks. (FTS4 ranked by the `sqlite-fts4` package, the design's first choice, is still
selectable through BACKEND for comparison: it ranks in Python, row by row, and missed
the speed target.) A small re-ranking in Python adds what the retrieval evaluation
(`scripts/eval_retrieval.py`) showed to help: the speaker named in the question, the
messages next to a hit, the other hits of the same day, and dates in the question.

Keeping it current costs what a turn changes, not what the vault holds: the index
records the commit it reflects, and `refresh` asks git which files changed since then
(committed or not), re-reads only those, and for a session file that only grew reads
just the new lines.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import sqlite3
import unicodedata
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

from agent.errors import UserError
from agent.stores import archive, memory, sessions
from agent.stores.frontmatter_io import FrontmatterError

DB_NAME = "index.sqlite"
SCHEMA = 3
KINDS = ("sessions", "memory", "notes", "archive")

# Which full-text engine backs the index: "fts5" (SQLite's built-in bm25()) or "fts4"
# (ranked by the sqlite-fts4 package, whose Python rank function costs about 6 us per
# matching row: 160 ms at p95 for several-word queries in a 100,000-message vault,
# against 13 ms for FTS5, with the same retrieval quality). Changing it rebuilds.
BACKEND = "fts5"


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

    def to_json(self) -> dict:
        return {"kind": self.kind, "path": self.path, "line": self.line, "ts": self.ts,
                "speaker": self.speaker, "session": self.session,
                "message_ids": self.message_ids, "topic": self.topic,
                "score": round(self.score, 4), "snippet": self.snippet, "text": self.text}


@dataclass(frozen=True)
class Ranking:
    """The weights of the re-ranking. The defaults are what `scripts/eval_retrieval.py`
    showed to help (see its --ablation); a weight of 0 turns a feature off."""
    candidates: int = 100          # BM25 candidates re-ranked in Python (200: same figures, slower)
    speaker: float = 1.0           # boost when a query word names the doc's speaker
    neighbours: float = 0.8        # share of a hit's score passed to the messages around it
    reach: int = 2                 # how many messages away neighbours count (1/distance)
    dates: float = 1.0             # boost when a date in the question is near the doc's date
    day: float = 0.3               # boost by the other hits of the same day (one subject)
    recency: float = 0.0           # boost newer docs (did not help)
    # Facts in MEMORY.md/USER.md (weight 1) and archive entries (their importance): the
    # evaluation data has neither, so this is a judgement, not a measurement.
    importance: float = 0.5
    stop_words: bool = True        # leave common words out of the query


RANKING = Ranking()


# ---- text normalisation ---------------------------------------------------------------

class _lazy_re:
    """A regular expression compiled on first use: compiling this module's patterns (the
    CJK character classes above all) costs ~10 ms, which `agent --help` and `agent note`
    should not pay."""

    __slots__ = ("_args", "_re")

    def __init__(self, *args):
        self._args, self._re = args, None

    def __getattr__(self, name):
        if self._re is None:
            self._re = re.compile(*self._args)
        return getattr(self._re, name)


_CJK = ("\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3031-\u3035\u3040-\u309f\u30a0-\u30ff"
        "\u3100-\u312f\u3131-\u318e\u31a0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
        "\uf900-\ufaff\U00020000-\U0002fa1f")
_CJK_RUN = _lazy_re(f"[{_CJK}]+")
_HAS_CJK = _lazy_re(f"[{_CJK}]")
_WORD = _lazy_re(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_LATIN_ACCENTED = _lazy_re("[\u00c0-\u024f\u1e00-\u1eff]")

STOP_WORDS = frozenset("""
a about above after again against all am an and any are aren as at be because been before
being below between both but by can cannot could couldn did didn do does doesn doing don
down during each few for from further had hadn has hasn have haven having he her here
hers herself him himself his how i if in into is isn it its itself just let me more most
mustn my myself no nor not of off on once only or other ought our ours ourselves out over
own same shan she should shouldn so some such than that the their theirs them themselves
then there these they this those through to too under until up very was wasn we were
weren what when where which while who whom why will with won would wouldn you your yours
yourself yourselves also ever get got s t d ll m re ve y
""".split())


def _fold(word: str) -> str:
    """A word as the index stores it: case-folded, Latin accents dropped, no apostrophes."""
    w = word.casefold()
    if "'" in w or "\u2019" in w:
        w = w.replace("\u2019", "'")
        if w.endswith("'s"):
            w = w[:-2]
        w = w.replace("'", "")
    if not w.isascii() and _LATIN_ACCENTED.search(w):
        w = "".join(c for c in unicodedata.normalize("NFKD", w) if not unicodedata.combining(c))
    return w


def tokens(text: str, query: bool = False) -> list[str]:
    """The words of `text` as indexed: folded words, CJK runs as overlapping bigrams
    (and, when indexing, each run's last character)."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    out: list[str] = []
    for word in _WORD.findall(text):
        if word.isascii() or not _HAS_CJK.search(word):
            w = _fold(word)
            if w:
                out.append(w)
            continue
        pos = 0
        for m in _CJK_RUN.finditer(word):
            if m.start() > pos:
                w = _fold(word[pos:m.start()])
                if w:
                    out.append(w)
            run = m.group()
            out.extend(run[i:i + 2] for i in range(len(run) - 1))
            if not query or len(run) == 1:
                # The last character alone too: with the bigrams it starts, a
                # one-character query (searched as a prefix) finds every place it occurs.
                out.append(run[-1])
            pos = m.end()
        if pos < len(word):
            w = _fold(word[pos:])
            if w:
                out.append(w)
    return out


def query_terms(query: str, limit: int = 32, stop_words: bool = True) -> list[str]:
    """The words a query searches for: stop words dropped (unless that leaves nothing),
    duplicates dropped, at most `limit`."""
    words = tokens(query, query=True)
    kept = [w for w in words if w not in STOP_WORDS] if stop_words else words
    kept = kept or words
    seen: dict[str, None] = {}
    for w in kept:
        seen.setdefault(w, None)
    return list(seen)[:limit]


def _is_cjk(term: str) -> bool:
    return bool(_HAS_CJK.match(term))


def match_expression(terms: list[str]) -> str:
    """A MATCH expression OR-ing the terms, each quoted, so no query text is syntax.

    Terms hold only letters and digits, so quoting them is always safe. A lone CJK
    character is searched as a prefix of the bigrams it starts.
    """
    parts = []
    for t in terms:
        if len(t) == 1 and _is_cjk(t):
            parts.append(f'"{t}*"' if BACKEND == "fts4" else f'"{t}"*')
        else:
            parts.append(f'"{t}"')
    return " OR ".join(parts)


# ---- reading the vault's files into documents -----------------------------------------

@dataclass
class Doc:
    """One document: what is shown, plus what ranking and filters need."""
    line: int | None
    text: str
    ts: str | None = None
    speaker: str | None = None
    msg: str | None = None
    weight: float = 0.0
    covers: str | None = None      # archive: JSON {session, ranges of message ids}
    topic: str | None = None       # archive topic, or the heading a fact is under


def kind_of(rel: str) -> str | None:
    """Which kind of document a vault path holds, or None if it is not indexed."""
    if sessions.is_session_file(rel):
        return "sessions"
    if rel in memory.MEMORY_FILES:
        return "memory"
    if memory.is_daily_note(rel):
        return "notes"
    if archive.is_entry_path(rel):
        return "archive"
    return None


def _message_doc(line_no: int, raw: bytes) -> Doc | None:
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    if not sessions.is_message(obj):
        return None
    text = sessions.message_text(obj.get("content"))
    if not text.strip():
        return None
    speaker = obj.get("speaker") if isinstance(obj.get("speaker"), str) else None
    who = speaker or (obj.get("role") if isinstance(obj.get("role"), str) else None)
    ts = obj.get("ts") if isinstance(obj.get("ts"), str) else None
    mid = obj.get("id")
    return Doc(line_no, text, ts=ts, speaker=who, msg=str(mid) if mid is not None else None)


def _memory_docs(rel: str, text: str) -> list[Doc]:
    return [Doc(f.line, f.text, weight=1.0, topic=f.section) for f in memory.read_facts(text)]


def _note_docs(rel: str, text: str) -> list[Doc]:
    return [Doc(n.line, n.text, ts=n.ts) for n in memory.read_note(rel, text)]


def _archive_doc(rel: str, root: Path) -> tuple[Doc | None, str | None]:
    try:
        entry = archive.load(root, rel)
    except FrontmatterError as e:
        return None, str(e)
    topic = str(entry.meta.get("topic") or "").strip() or None
    importance = entry.importance
    if importance > 1:          # a 1-10 scale
        importance /= 10
    importance = min(max(importance, 0.0), 1.0)
    session = str(entry.meta.get("session") or "") or None
    doc = Doc(1, entry.summary, ts=entry.created, weight=importance, topic=topic,
              covers=json.dumps({"session": session, "ranges": entry.sources()}))
    return doc, None


# ---- the database ---------------------------------------------------------------------

def db_path(vault) -> Path:
    return vault.state / DB_NAME


def _create(db: sqlite3.Connection) -> None:
    # FTS5 keeps no copy of the text (contentless): the display text is in `docs`, and a
    # row leaves the full-text index by the 'delete' command given its words again,
    # which `_body` recomputes from `docs` (the unicode version is pinned in meta).
    fts = ("CREATE VIRTUAL TABLE fts USING fts4(body, tokenize=porter)" if BACKEND == "fts4"
           else "CREATE VIRTUAL TABLE fts USING fts5(body, content='', tokenize='porter ascii')")
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
    return {"schema": str(SCHEMA), "backend": BACKEND, "unicode": unicodedata.unidata_version}


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    if BACKEND == "fts4":
        import sqlite_fts4
        sqlite_fts4.register_functions(db)
    return db


def _meta(db, key):
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return row[0] if row else None


def _set_meta(db, key, value):
    if _meta(db, key) != value:
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


@contextlib.contextmanager
def _open(vault):
    """A connection to an index of the right schema (made empty if missing or unusable)."""
    path = db_path(vault)
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in (1, 2):
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
        except sqlite3.DatabaseError:
            if attempt == 2:
                raise
        # An index from another version, or a damaged file: it is derived, start over.
        if db is not None:
            db.close()
        _remove_db(path)
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
    if BACKEND == "fts4":
        db.execute("DELETE FROM fts WHERE rowid IN (SELECT id FROM docs WHERE file=?)", (file_id,))
    else:
        rows = db.execute("SELECT id, text, topic FROM docs WHERE file=?", (file_id,)).fetchall()
        db.executemany("INSERT INTO fts(fts, rowid, body) VALUES ('delete', ?, ?)",
                       [(i, _body(text, topic)) for i, text, topic in rows])
    db.execute("DELETE FROM docs WHERE file=?", (file_id,))


def _tail(last_line: bytes) -> str:
    return f"{len(last_line)}:{hashlib.sha1(last_line).hexdigest()}"


def _index_session(db, root: Path, rel: str, st, row) -> int:
    """Index the lines of a session file not indexed yet (all of them if it was rewritten)."""
    start, line_no, appended, messages = 0, 0, False, 0
    file_id = row["id"] if row is not None else _file_id(db, rel, "sessions")
    with open(root / rel, "rb") as f:
        if row is not None and row["size"] and st.st_size >= row["size"] and row["tail"]:
            n = int(row["tail"].split(":", 1)[0])
            if n <= row["size"]:
                f.seek(row["size"] - n)
                if _tail(f.read(n)) == row["tail"]:
                    start, line_no, appended = row["size"], row["lines"], True
                    messages = row["messages"]
        if not appended and row is not None:
            _drop_docs(db, file_id)
        f.seek(start)
        data = f.read()
    end = data.rfind(b"\n") + 1      # a torn last line waits until it is whole
    docs, last = [], b""
    for raw in data[:end].split(b"\n")[:-1] if end else []:
        line_no += 1
        last = raw + b"\n"
        if raw.strip():
            if b'"role"' in raw and b'"type":"compact"' not in raw:
                messages += 1        # every message, with text or not (status counts them)
            d = _message_doc(line_no, raw)
            if d is not None:
                docs.append(d)
    _insert(db, file_id, docs)
    tail = _tail(last) if last else (row["tail"] if appended else None)
    db.execute("UPDATE files SET size=?, mtime=?, lines=?, tail=?, messages=? WHERE id=?",
               (start + end, st.st_mtime_ns, line_no, tail, messages, file_id))
    return len(docs)


def _index_text_file(db, root: Path, rel: str, kind: str, st, row) -> int:
    data = (root / rel).read_bytes()
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
        docs = _memory_docs(rel, text)
    elif kind == "notes":
        docs = _note_docs(rel, text)
    else:
        doc, problem = _archive_doc(rel, root)
        docs = [doc] if doc else []
    _insert(db, file_id, docs)
    db.execute("UPDATE files SET size=?, mtime=?, tail=?, problem=? WHERE id=?",
               (st.st_size, st.st_mtime_ns, digest, problem, file_id))
    return len(docs)


def _index_path(db, root: Path, rel: str) -> int:
    kind = kind_of(rel)
    path = root / rel
    try:
        st = path.stat() if path.is_file() else None
    except OSError:
        st = None
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


def _walk(root: Path) -> list[str]:
    """Every indexable file on disk (a full build; refreshes never walk the vault)."""
    out = [name for name in memory.MEMORY_FILES if (root / name).is_file()]
    for top, pattern in (("sessions", "*.jsonl"), ("memory", "*.md"), ("archive", "*.md")):
        base = root / top
        if base.is_dir():
            for p in base.rglob(pattern):
                rel = p.relative_to(root).as_posix()
                if kind_of(rel) and p.is_file():
                    out.append(rel)
    return sorted(out)


def _changes(vault, since: str, head: str | None,
             clean: bool = False) -> tuple[set[str], list[str]] | None:
    """(paths changed since commit `since`, paths dirty now), or None if `since` is gone.

    `clean`: the caller has just committed every change it knew of, so the work tree
    is taken as clean without asking git; a file edited meanwhile is still dirty at the
    next refresh (every search starts with one) and is picked up then.
    """
    from agent.vault.repo import GitError
    dirty = [] if clean else vault.dirty_paths()
    changed = set(dirty)
    if head and since != head:
        try:
            out = vault.git("diff", "--name-only", "-z", "--no-renames", since, head)
        except GitError:
            return None     # history rewritten under the index: rebuild
        changed.update(p for p in out.split("\0") if p)
    return changed, dirty


def _update(vault, db, full: bool = False, after_commit: bool = False) -> _Stats:
    stats = _Stats()
    db.row_factory = sqlite3.Row
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as e:
        if "locked" not in str(e):
            raise
        raise SearchError(f"The search index {db_path(vault)} is busy (another process is "
                          f"rebuilding it); try again in a moment.") from None
    try:
        head = vault.head()
        indexed = _meta(db, "commit")
        changes = _changes(vault, indexed, head, after_commit) if indexed and not full else None
        if changes is None:
            full = True
            if db.execute("SELECT 1 FROM files LIMIT 1").fetchone():
                db.execute("DELETE FROM fts" if BACKEND == "fts4"
                           else "INSERT INTO fts(fts) VALUES ('delete-all')")
                db.execute("DELETE FROM docs")
                db.execute("DELETE FROM files")
            paths = _walk(vault.root)
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
            _set_meta(db, "built", datetime.now().astimezone().isoformat(timespec="seconds"))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    finally:
        db.row_factory = None
    return stats


def refresh(vault, *, after_commit: bool = False) -> _Stats:
    """Bring the index up to date with the vault's files (cheap when little changed).

    `after_commit=True` right after the caller's own commit saves a `git status`.
    """
    with _open(vault) as db:
        return _update(vault, db, after_commit=after_commit)


def rebuild(vault) -> _Stats:
    """Build the index again from every file of the vault."""
    _remove_db(db_path(vault))
    with _open(vault) as db:
        return _update(vault, db, full=True)


@dataclass
class Status:
    path: Path
    exists: bool
    backend: str = BACKEND
    commit: str | None = None
    head: str | None = None
    built: str | None = None
    documents: dict = field(default_factory=dict)
    size: int = 0
    commits_behind: int | None = None
    files_behind: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def status(vault) -> Status:
    """What the index holds and how far behind the vault it is (without updating it)."""
    path = db_path(vault)
    st = Status(path, path.exists(), head=vault.head())
    if not st.exists:
        return st
    st.size = sum(os.path.getsize(f"{path}{s}") for s in ("", "-wal") if os.path.exists(f"{path}{s}"))
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
        except sqlite3.DatabaseError:
            st.exists = False
            return st
        if st.commit and st.head and st.commit != st.head:
            out = vault.git("rev-list", "--count", f"{st.commit}..{st.head}", check=False).strip()
            st.commits_behind = int(out) if out.isdigit() else None
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


def message_counts(vault) -> tuple[int, int]:
    """(sessions, messages) from the index, brought up to date first: a cost that does
    not grow with history, unlike reading every transcript."""
    refresh(vault)
    with _open(vault) as db:
        row = db.execute("SELECT count(DISTINCT session), coalesce(sum(messages), 0) FROM files "
                         "WHERE kind = 'sessions'").fetchone()
    return row[0], row[1]


# ---- searching ------------------------------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(
    "january february march april may june july august september october november december".split(), 1)}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_MON = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_DATE_PATTERNS = [
    (_lazy_re(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), "ymd"),
    (_lazy_re(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MON}\.?,?\s+(\d{{4}})\b", re.I), "dmy"),
    (_lazy_re(rf"\b{_MON}\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I), "mdy"),
    (_lazy_re(rf"\b{_MON}\.?,?\s+(?:of\s+)?(\d{{4}})\b", re.I), "my"),
    (_lazy_re(r"\b(?:in|during|of|since|from)\s+((?:19|20)\d{2})\b", re.I), "y"),
    # A month without a year ("in June") means that month of whichever year.
    (_lazy_re(rf"\b(?:in|during|of|since|from|early|late|mid|last|this|next)[\s-]+{_MON}\b", re.I), "m"),
]


_ANY_YEAR = 4     # a leap year standing for "any year" in a month-only span


def question_dates(query: str) -> list[tuple[date, date]]:
    """Dates and periods named in a question, as (first day, last day).

    A month named without a year comes back in the year `_ANY_YEAR`, meaning any year.
    """
    spans: list[tuple[date, date]] = []
    taken: list[tuple[int, int]] = []
    for pattern, form in _DATE_PATTERNS:
        for m in pattern.finditer(query):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue
            try:
                if form == "ymd":
                    d = date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
                    span = (d, d)
                elif form == "dmy":
                    d = date(int(m.group(3)), _MONTHS[m.group(2).lower()[:3]], int(m.group(1)))
                    span = (d, d)
                elif form == "mdy":
                    d = date(int(m.group(3)), _MONTHS[m.group(1).lower()[:3]], int(m.group(2)))
                    span = (d, d)
                elif form == "my":
                    y, mo = int(m.group(2)), _MONTHS[m.group(1).lower()[:3]]
                    end = date(y + (mo == 12), mo % 12 + 1, 1) - timedelta(days=1)
                    span = (date(y, mo, 1), end)
                elif form == "y":
                    y = int(m.group(1))
                    span = (date(y, 1, 1), date(y, 12, 31))
                else:
                    mo = _MONTHS[m.group(1).lower()[:3]]
                    span = (date(_ANY_YEAR, mo, 1),
                            date(_ANY_YEAR + (mo == 12), mo % 12 + 1, 1) - timedelta(days=1))
            except (ValueError, KeyError):
                continue
            taken.append((m.start(), m.end()))
            spans.append(span)
    return spans


@dataclass
class _Cand:
    id: int
    file: int
    path: str
    line: int | None
    kind: str
    ts: str | None
    speaker: str | None
    session: str | None
    msg: str | None
    weight: float
    covers: str | None
    topic: str | None
    text: str
    bm25: float = 0.0
    score: float = 0.0
    passed: float = 0.0

    @property
    def day(self) -> str | None:
        return self.ts[:10] if self.ts else None


_COLS = ("d.id, d.file, f.path, d.line, f.kind, d.ts, d.speaker, coalesce(f.session, "
         "json_extract(d.covers, '$.session')), d.msg, d.weight, d.covers, d.topic, d.text")


def _rank_sql() -> str:
    return "rank_bm25(matchinfo(fts, 'pcnalx'))" if BACKEND == "fts4" else "bm25(fts)"


def _filters(since: date | None, kinds) -> tuple[list[str], list]:
    where, args = [], []
    if kinds is not None:
        where.append(f"f.kind IN ({','.join('?' * len(kinds))})")
        args.extend(sorted(kinds))
    if since is not None:
        where.append("d.ts >= ?")       # ISO strings compare as times
        args.append(since.isoformat())
    return where, args


def _candidates(db, expr: str, n: int, since: date | None, kinds) -> list[_Cand]:
    where, args = _filters(since, kinds)
    if not where:
        # Rank inside the full-text table first, then look up only the winners.
        sql = (f"SELECT {_COLS}, s FROM (SELECT rowid AS rid, {_rank_sql()} AS s FROM fts "
               f"WHERE fts MATCH ? ORDER BY s LIMIT ?) JOIN docs d ON d.id = rid "
               f"JOIN files f ON f.id = d.file ORDER BY s")
        rows = db.execute(sql, (expr, n)).fetchall()
    else:
        sql = (f"SELECT {_COLS}, {_rank_sql()} AS s FROM fts JOIN docs d ON d.id = fts.rowid "
               f"JOIN files f ON f.id = d.file WHERE fts MATCH ? AND {' AND '.join(where)} "
               f"ORDER BY s LIMIT ?")
        rows = db.execute(sql, (expr, *args, n)).fetchall()
    return [_Cand(*r[:13], bm25=-(r[13] or 0.0)) for r in rows]


def _around(db, cands: list[_Cand], reach: int) -> dict[int, list[_Cand]]:
    """The session messages near the candidates, per file in line order.

    Looks a few lines either side (lines without text, such as tool results, are not
    documents, so the nearest messages may be more than `reach` lines away; a tool call
    carries its text on the same line, so one gap line per step is enough).
    """
    width = 2 * reach
    spans: list[tuple[int, int, int]] = []
    for f, ln in sorted({(c.file, c.line) for c in cands if c.kind == "sessions" and c.line}):
        lo, hi = ln - width, ln + width
        if spans and spans[-1][0] == f and lo <= spans[-1][2] + 1:
            spans[-1] = (f, spans[-1][1], hi)        # overlapping windows read once
        else:
            spans.append((f, lo, hi))
    per_file: dict[int, list[_Cand]] = {}
    for i in range(0, len(spans), 300):
        chunk = spans[i:i + 300]
        values = ",".join("(?,?,?)" for _ in chunk)
        sql = (f"WITH w(file, lo, hi) AS (VALUES {values}) SELECT {_COLS} FROM w "
               f"JOIN docs d ON d.file = w.file AND d.line BETWEEN w.lo AND w.hi "
               f"JOIN files f ON f.id = d.file")
        for r in db.execute(sql, [x for span in chunk for x in span]):
            c = _Cand(*r)
            per_file.setdefault(c.file, []).append(c)
    for docs in per_file.values():
        docs.sort(key=lambda c: c.line)
    return per_file


# BM25 scores every document holding any query word, so a long query of common words
# (a pasted paragraph) costs in proportion to the vault. Past this many postings the
# most common words are left out: they weigh least in BM25 (lowest idf), and the rarer
# words decide the ranking anyway.
POSTINGS_BUDGET = 20000
_MIN_TERMS = 3


def _within_budget(db, terms: list[str]) -> list[str]:
    """The query's terms, leaving out the most common ones past POSTINGS_BUDGET."""
    if BACKEND != "fts5" or len(terms) <= _MIN_TERMS:
        return terms
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab USING fts5vocab(main, fts, 'row')")
    stem = _Stemmer(db)
    plain = [t for t in terms if not (len(t) == 1 and _is_cjk(t))]   # prefixes stay
    stems = {t: stem(t) for t in plain}
    keys = sorted(set(stems.values()))
    df = dict(db.execute(f"SELECT term, doc FROM temp.vocab WHERE term IN "
                         f"({','.join('?' * len(keys))})", keys).fetchall())
    if sum(df.values()) <= POSTINGS_BUDGET:
        return terms
    kept, total = [t for t in terms if t not in stems], 0
    for t in sorted((t for t in plain if df.get(stems[t])), key=lambda t: df[stems[t]]):
        if len(kept) >= _MIN_TERMS and total + df[stems[t]] > POSTINGS_BUDGET:
            break
        kept.append(t)
        total += df[stems[t]]
    return kept or terms


def _near(d: date, first: date, last: date) -> bool:
    """Whether a message of day `d` may tell of a day in first..last: said a few days
    before (plans) up to a week and a half after (reports)."""
    if first.year == _ANY_YEAR:
        try:
            first, last = first.replace(year=d.year), last.replace(year=d.year + (last.year - first.year))
        except ValueError:      # 29 February
            first, last = first.replace(year=d.year, day=28), last.replace(year=d.year, day=28)
    return first - timedelta(days=3) <= d <= last + timedelta(days=10)


def _speaker_terms(speaker: str | None, cache: dict) -> set[str]:
    if not speaker:
        return set()
    if speaker not in cache:
        cache[speaker] = set(tokens(speaker)) - STOP_WORDS
    return cache[speaker]


def _rerank(db, cands: list[_Cand], query: str, terms: list[str], ranking: Ranking,
            since, kinds) -> list[_Cand]:
    if not cands:
        return cands
    top = max(c.bm25 for c in cands) or 1.0
    for c in cands:
        c.score = c.bm25 / top
    qset = set(terms)

    if ranking.neighbours:
        # A message's neighbours share its subject: a question's answer is often the
        # reply to the message that matches the words of the question.
        by_id = {c.id: c for c in cands}
        by_file: dict[int, list[_Cand]] = {}
        for c in cands:
            if c.kind == "sessions":
                by_file.setdefault(c.file, []).append(c)
        passed: dict[int, float] = {}
        after = since.isoformat() if since is not None else None
        for f, docs in _around(db, cands, ranking.reach).items():
            pos = {d.id: i for i, d in enumerate(docs)}
            for c in by_file.get(f, ()):
                i = pos[c.id]
                for step in range(1, ranking.reach + 1):
                    share = ranking.neighbours * c.score / step
                    for j in (i - step, i + step):
                        if 0 <= j < len(docs):
                            n = docs[j]
                            if share > passed.get(n.id, 0.0):
                                passed[n.id] = share
                            if n.id not in by_id and (after is None or (n.ts or "") >= after):
                                by_id[n.id] = n
                                cands.append(n)
        for c in cands:
            c.score += passed.get(c.id, 0.0)

    if ranking.speaker:
        cache: dict = {}
        for c in cands:
            if _speaker_terms(c.speaker, cache) & qset:
                c.score *= 1 + ranking.speaker

    if ranking.dates:
        spans = question_dates(query)
        if spans:
            for c in cands:
                if not c.day:
                    continue
                try:
                    d = date.fromisoformat(c.day)
                except ValueError:
                    continue
                if any(_near(d, a, b) for a, b in spans):
                    c.score *= 1 + ranking.dates

    if ranking.day:
        per_day: dict[str, float] = {}
        for c in cands:
            if c.day:
                per_day[c.day] = per_day.get(c.day, 0.0) + c.score
        best = max(per_day.values(), default=0.0) or 1.0
        for c in cands:
            if c.day:
                c.score *= 1 + ranking.day * (per_day[c.day] / best)

    if ranking.recency:
        days = [c.day for c in cands if c.day]
        if days:
            newest = date.fromisoformat(max(days))
            for c in cands:
                if c.day:
                    with contextlib.suppress(ValueError):
                        age = (newest - date.fromisoformat(c.day)).days
                        c.score *= 1 + ranking.recency * math.exp(-age / 180)

    if ranking.importance:
        for c in cands:
            if c.kind in ("memory", "archive"):
                c.score *= 1 + ranking.importance * (c.weight or 0.0)

    cands = [c for c in cands if c.score > 0]
    cands.sort(key=lambda c: (-c.score, -c.id))
    return cands


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


def search(vault, query: str, limit: int = 10, *, since: date | None = None,
           kinds: set[str] | None = None, exclude_ids: set[str] = frozenset(),
           ranking: Ranking | None = None) -> list[Hit]:
    """Ranked hits for a user's query over everything the vault remembers.

    `kinds` narrows to some of sessions, memory, notes, archive; `since` keeps hits
    dated on or after that day; `exclude_ids` drops messages (e.g. those already in the
    conversation window). Any text is a valid query: its words are searched, never its
    punctuation or operators.
    """
    if kinds is not None:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise SearchError(f"unknown kind {', '.join(sorted(unknown))}: use one of {', '.join(KINDS)}")
    ranking = ranking or RANKING
    terms = query_terms(query, stop_words=ranking.stop_words)
    with _open(vault) as db:
        _update(vault, db)
        if not terms or limit <= 0:
            return []
        db.row_factory = None
        expr = match_expression(_within_budget(db, terms))
        n = max(ranking.candidates, limit * 3) + len(exclude_ids)
        cands = _candidates(db, expr, n, since, kinds)
        cands = _rerank(db, cands, query, terms, ranking, since, kinds)
        hits: list[Hit] = []
        stems = _Stemmer(db)
        qstems = {stems(t) for t in terms if not _is_cjk(t)}
        cjk = [t for t in terms if _is_cjk(t)]
        for c in cands:
            if c.msg is not None and c.msg in exclude_ids:
                continue
            ids = [c.msg] if c.msg else (_covered_ids(db, c.covers) if c.kind == "archive" else [])
            if c.kind == "archive" and exclude_ids and ids and set(ids) <= exclude_ids:
                continue
            hits.append(Hit(kind=c.kind, path=c.path, line=c.line, ts=c.ts, speaker=c.speaker,
                            session=c.session, message_ids=ids, text=c.text,
                            snippet=snippet(c.text, qstems, cjk, stems), score=c.score,
                            topic=c.topic))
            if len(hits) >= limit:
                break
        return hits


# ---- snippets -------------------------------------------------------------------------

_STEMS: dict[str, str] = {}


class _Stemmer:
    """Porter stems of single words, from the same tokenizer the index uses."""

    def __init__(self, db):
        self.db = db
        self.cache = _STEMS
        db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.stem USING fts3tokenize(porter)")

    def __call__(self, word: str) -> str:
        s = self.cache.get(word)
        if s is None:
            row = self.db.execute("SELECT token FROM temp.stem WHERE input=?", (word,)).fetchone()
            s = self.cache[word] = row[0] if row else word
        return s


def snippet(text: str, stems: set[str], cjk: list[str], stem, width: int = 240) -> str:
    """The text (cut to a window around the matches when long) with matches in [ ]."""
    marks: list[tuple[int, int]] = []
    for m in _WORD.finditer(text):
        word = m.group()
        if _HAS_CJK.search(word):
            continue
        if stem(_fold(unicodedata.normalize("NFKC", word))) in stems:
            marks.append((m.start(), m.end()))
    if cjk:
        covered = [False] * len(text)
        for t in cjk:
            start = text.find(t)
            while start >= 0:
                for k in range(start, start + len(t)):
                    covered[k] = True
                start = text.find(t, start + 1)
        i = 0
        while i < len(text):
            if covered[i]:
                j = i
                while j < len(text) and covered[j]:
                    j += 1
                marks.append((i, j))
                i = j
            else:
                i += 1
        marks.sort()
    flat = " ".join(text.split()) if len(text) <= width else None
    lo, hi = 0, len(text)
    if flat is None:
        centre = marks[0][0] if marks else 0
        if marks:
            # The window with the most matches wins.
            best = max(range(len(marks)), key=lambda i: sum(
                1 for a, _ in marks if marks[i][0] <= a < marks[i][0] + width * 2 // 3))
            centre = marks[best][0]
        lo = max(0, centre - width // 3)
        hi = min(len(text), lo + width)
        lo = max(0, min(lo, hi - width))
        if lo > 0:
            sp = text.find(" ", lo, lo + 20)
            lo = sp + 1 if sp >= 0 else lo
        if hi < len(text):
            sp = text.rfind(" ", hi - 20, hi)
            hi = sp if sp > lo else hi
    out, pos = [], lo
    for a, b in marks:
        if a < lo or b > hi or a < pos:
            continue
        out.append(text[pos:a])
        out.append(f"[{text[a:b]}]")
        pos = b
    out.append(text[pos:hi])
    s = " ".join("".join(out).split())
    return ("…" if lo > 0 else "") + s + ("…" if hi < len(text) else "")
