"""Session transcripts: `sessions/<channel>/<chat>/YYYY-MM.jsonl`, append-only.

One JSON object per line with at least `id`, `ts` (ISO 8601 with offset), `role`,
`content` and `turn`. Compaction appends a marker line
`{"type": "compact", "archive": 42, "through": "<message id>", "ids": [...]}` naming
the messages it archived; the active window is every message no marker covers (a
marker of before `ids` existed covers everything up to its `through`), so the lines of
two machines that wrote to one session and compacted it before they synced lose none. This module knows nothing of git or models: it reads
files and hands back the lines to append.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from agent.errors import UserError

SESSIONS = "sessions"
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}")     # fullmatch: no newline
_GROUP = re.compile(r"-[0-9]{1,99}")     # a chat may be a negative number (a Telegram group)
ROLES = ("user", "assistant", "system")



class SessionError(UserError):
    """Bad session data; the message names the file and line."""


def check_key(key: str) -> str:
    """A session key `channel/chat` (e.g. `cli/default`), or SessionError."""
    parts = key.split("/") if isinstance(key, str) else []
    if len(parts) != 2 or not _SEGMENT.fullmatch(parts[0]) or not (
            _SEGMENT.fullmatch(parts[1]) or _GROUP.fullmatch(parts[1])):
        raise SessionError(
            f"session {str(key)[:120]!r} is not of the form CHANNEL/CHAT (letters, digits, "
            f". _ - @ +; at most 100 characters each), for example cli/default")
    return key


def session_dir(key: str) -> str:
    return f"{SESSIONS}/{check_key(key)}"


def month_file(key: str, ts: datetime) -> str:
    """The file a message written at `ts` goes to."""
    return f"{session_dir(key)}/{ts:%Y-%m}.jsonl"


def is_session_file(rel: str) -> bool:
    return rel.startswith(f"{SESSIONS}/") and rel.endswith(".jsonl")


def key_of(rel: str) -> str:
    """The session key of a session file's vault-relative path."""
    return "/".join(rel.split("/")[1:-1])


def is_message(obj) -> bool:
    """Whether a session line is a message (not a compact marker or anything else)."""
    return isinstance(obj, dict) and obj.get("type") != "compact" and "role" in obj


def parse_ts(value, where: str) -> datetime:
    """An ISO 8601 time; one without an offset is taken as local time."""
    if not isinstance(value, str):
        raise SessionError(f"{where}: ts must be an ISO 8601 string, got {value!r}")
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SessionError(f"{where}: ts {value!r} is not an ISO 8601 time") from None
    return ts if ts.tzinfo else ts.astimezone()


def dumps(obj: dict) -> str:
    """One JSONL line: compact, UTF-8 kept readable."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def message_text(content, tool=None, sep: str = "\n") -> str:
    """A message's text: its content when a string, else its text blocks joined by `sep`.

    `tool(block)` renders a tool_use or tool_result block as text (they are left out
    when it is None); empty parts are dropped. The one reading of a
    message's words: search indexes it, compaction and the dream quote it.
    """
    if isinstance(content, str):
        return content
    parts = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, str):
            parts.append(block)
        elif not isinstance(block, dict):
            continue
        elif block.get("type") == "text":
            if isinstance(block.get("text"), str):
                parts.append(block["text"])
        elif tool is not None and block.get("type") in ("tool_use", "tool_result"):
            parts.append(tool(block))
    return sep.join(p for p in parts if p)


SESSION_BYTES = 256 * 1024 * 1024     # one month of one session, read whole


def _bytes(path: Path, rel: str | None, root: Path | None) -> bytes:
    """A session file's bytes through the vault's one safe read (no link out, no FIFO)."""
    from agent.vault import safe

    path = Path(path)
    if root is None or rel is None:
        root, rel = path.parent, path.name
    data = safe.read_bytes(root, rel, limit=SESSION_BYTES)
    if data is None:
        raise FileNotFoundError(2, "no such session file", str(path))
    return data


def parse_line(raw: bytes, name: str, n: int) -> dict:
    """One session line; SessionError names the file and line when it is not a JSON object."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SessionError(f"{name}:{n}: byte 0x{raw[e.start]:02x} is not UTF-8; fix or "
                           f"remove the line") from None
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise SessionError(f"{name}:{n}: nested too deeply; fix or remove the line") from None
    except ValueError as e:
        raise SessionError(f"{name}:{n}: not valid JSON ({getattr(e, 'msg', e)}); fix or "
                           f"remove the line") from None
    if not isinstance(obj, dict):
        raise SessionError(f"{name}:{n}: a session line must be a JSON object")
    return obj


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def read_file(path: Path, rel: str | None = None, root: Path | None = None) -> list[dict]:
    """Every line of one session file; SessionError names the file and line of a bad one.

    A torn last line (no newline: a write cut short, set aside by the next repair) is
    left out rather than refused.
    """
    out = []
    name = rel or str(path)
    data = _bytes(path, rel, root)
    lines = data.split(b"\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(parse_line(line, name, n))
        except SessionError:
            if n == len(lines):      # no newline after it: torn
                continue
            raise
    return out


@dataclass
class Session:
    """A session's files in a vault folder (read side only)."""
    root: Path
    key: str

    @property
    def dir(self) -> Path:
        return self.root / session_dir(self.key)

    def files(self) -> list[Path]:
        return sorted(self.dir.glob("*.jsonl")) if self.dir.is_dir() else []

    def lines(self) -> list[dict]:
        out = []
        for f in self.files():
            out.extend(read_file(f, f.relative_to(self.root).as_posix(), self.root))
        return out

    def window(self) -> tuple[list[dict], dict | None]:
        """The active window's messages, and the last compact marker (see read_window)."""
        w = read_window(self.root, self.key)
        return w.messages, w.marker

    def last_line(self) -> dict | None:
        """The last JSON line of the newest file, read from its end (cheap)."""
        for path in reversed(self.files()):
            from agent.vault import safe
            try:
                fd, size = safe.open_file(self.root, path.relative_to(self.root).as_posix(),
                                          limit=None)
            except FileNotFoundError:
                continue
            with os.fdopen(fd, "rb") as f:
                f.seek(max(0, size - 65536))
                lines = [ln for ln in f.read().splitlines() if ln.strip()]
            for raw in reversed(lines):
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    return obj
        return None

    def last_turn(self) -> int:
        for f in reversed(self.files()):
            for obj in _backward(f, f.relative_to(self.root).as_posix(), self.root):
                if isinstance(obj.get("turn"), int) and not isinstance(obj.get("turn"), bool):
                    return obj["turn"]
        return 0


@dataclass
class Window:
    messages: list[dict]            # the active window, oldest first (no marker lines)
    files: list[str]                # the vault-relative file of each message
    marker: dict | None             # the last compact marker
    last_turn: int                  # the session's last turn number (0 when none)


def read_window(root: Path, key: str) -> Window:
    """The active window: the messages after the last marker's `through` message.

    Compaction archives the window's oldest part and appends its marker after the kept
    rest, so the window is what follows the `through` message (marker lines skipped),
    or what follows the marker when `through` is not found. Files are read newest
    first and lines parsed from the end back only as far as needed, so the cost
    follows the window, not the session's history.
    """
    root = Path(root)
    files = Session(root, key).files()
    picked: list[tuple[str, dict]] = []        # newest first
    marker: dict | None = None
    through: str | None = None
    done = False
    for f in reversed(files):
        rel = f.relative_to(root).as_posix()
        for obj in _backward(f, rel, root):
            if obj.get("type") == "compact":
                if marker is None and _covered_ids(obj) is not None:
                    return _window_by_ids(root, key, files)
                if marker is None:
                    marker = obj
                    through = None if obj.get("through") is None else str(obj["through"])
                    if through is None:
                        done = True
                        break
                continue
            if marker is not None and str(obj.get("id")) == through:
                done = True
                break
            picked.append((rel, obj))
        if done:
            break
    if marker is not None and not done:
        # `through` is not in the session (a hand edit): the window starts after the marker.
        picked = _after_marker(root, files)
    return _window(root, key, picked, marker)


def _window(root: Path, key: str, picked: list[tuple[str, dict]], marker: dict | None) -> Window:
    """The Window of the (file, message) pairs read newest first."""
    picked = picked[::-1]
    turns = [o["turn"] for _, o in picked if isinstance(o.get("turn"), int)]
    last_turn = max(turns) if turns else Session(root, key).last_turn()
    return Window([o for _, o in picked], [r for r, _ in picked], marker, last_turn)


def _covered_ids(marker: dict) -> list[str] | None:
    """The ids of the messages a compact marker covers (None for a marker of before
    markers listed them)."""
    ids = marker.get("ids")
    if isinstance(ids, list) and ids:
        return [str(i) for i in ids]
    return None


def _window_by_ids(root: Path, key: str, files: list[Path]) -> Window:
    """The window when the last marker lists the ids it covers: every message no marker
    covers. Two machines that wrote to one session and compacted it before they synced
    leave interleaved lines (agent/stores/merge.py orders them by time), so a marker may
    follow messages it does not cover: those stay in the window.

    Read from the end back past the first message of every marker seen (where its
    compacted part began), then to the next marker line: what lies before was the
    window of an earlier compaction. A marker without ids covers everything up to its
    `through`, as before."""
    picked: list[tuple[str, dict]] = []        # newest first
    covered: set[str] = set()
    need: set[str] = set()                     # first ids of the markers seen, not yet reached
    marker: dict | None = None
    boundary: str | None = None                # an older marker's `through`: all before is covered
    tail = True                                # still after the last marker's `through`
    through: str | None = None
    done = False
    for f in reversed(files):
        rel = f.relative_to(root).as_posix()
        for obj in _backward(f, rel, root):
            if obj.get("type") == "compact":
                if marker is not None and not need:
                    done = True
                    break
                ids = _covered_ids(obj)
                if marker is None:
                    marker = obj
                    through = str(obj.get("through"))
                if ids is None:
                    if boundary is None and obj.get("through") is not None:
                        boundary = str(obj["through"])
                    continue
                covered.update(ids)
                need.add(ids[0])
                continue
            if obj.get("id") is None:
                if tail:                       # a line without an id goes with the window
                    picked.append((rel, obj))  # only after the last compaction
                continue
            mid = str(obj["id"])
            if boundary is not None and mid == boundary:
                done = True
                break
            if marker is not None and mid == through:
                tail = False
            need.discard(mid)
            if mid not in covered:
                picked.append((rel, obj))
        if done:
            break
    return _window(root, key, picked, marker)


def _backward(path: Path, rel: str, root: Path | None = None):
    """The objects of a session file from its last line to its first."""
    data = _bytes(path, rel, root)
    end = len(data)
    torn = bool(data) and not data.endswith(b"\n")
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        raw = data[start:end].strip()
        last, end = end == len(data), start
        if not raw:
            continue
        try:
            obj = parse_line(raw, rel, data.count(b"\n", 0, start) + 1)
        except SessionError:
            if last and torn:
                continue   # a torn last line: the vault lock's repair sets it aside
            raise
        yield obj


def _after_marker(root: Path, files: list[Path]) -> list[tuple[str, dict]]:
    """(file, message) after the last marker, newest first."""
    out: list[tuple[str, dict]] = []
    for f in reversed(files):
        rel = f.relative_to(root).as_posix()
        lines = read_file(f, rel, root)
        for obj in reversed(lines):
            if obj.get("type") == "compact":
                return out
            out.append((rel, obj))
    return out


def list_sessions(root: Path) -> list[str]:
    base = Path(root) / SESSIONS
    if not base.is_dir():
        return []
    return sorted(f"{c.name}/{s.name}" for c in base.iterdir() if c.is_dir()
                  for s in c.iterdir() if s.is_dir())


def message_id(session: str, ts: str, role: str, content) -> str:
    """A stable id for an imported message that has none (so re-imports add nothing)."""
    import hashlib
    h = hashlib.sha1(dumps([session, ts, role, content]).encode()).hexdigest()
    return f"imp-{h[:12]}"


def parse_import(path: Path) -> list[dict]:
    """Read a transcript to import: one JSON object per line.

    Each line has `session`, `role`, `content`, `ts` and optionally `id` and `speaker`.
    Raises SessionError listing every malformed line by number; nothing is returned
    from a file with any.
    """
    from agent.vault import safe

    records, problems = [], []
    seen_ids: dict[tuple[str, str], int] = {}
    data = safe.read_given(path, SESSION_BYTES)
    if data.startswith(b"\xef\xbb\xbf"):      # a UTF-8 byte-order mark is fine
        data = data[3:]
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = parse_line(raw, str(path), n)
        except SessionError as e:
            problems.append(str(e).replace("; fix or remove the line", "").replace(
                "a session line must be a JSON object", "expected a JSON object"))
            continue
        if "type" in obj:
            problems.append(f"{where}: a line with \"type\" ({str(obj['type'])[:20]!r}) is a "
                            f"marker the agent writes itself, not a message to import")
            continue
        missing = [k for k in ("session", "role", "content", "ts") if k not in obj]
        if missing:
            problems.append(f"{where}: missing {', '.join(missing)}")
            continue
        try:
            key = obj["session"]
            if not isinstance(key, str):
                raise SessionError(f"{where}: session must be a string")
            if "/" not in key:
                key = f"import/{key}"
            check_key(key)
            if obj["role"] not in ROLES:
                raise SessionError(f"{where}: role must be one of {', '.join(ROLES)}")
            if not isinstance(obj["content"], (str, list)):
                raise SessionError(f"{where}: content must be a string or a list of blocks")
            ts = parse_ts(obj["ts"], where)
            mid = obj.get("id")
            if mid is not None and not isinstance(mid, (str, int)):
                raise SessionError(f"{where}: id must be a string")
        except SessionError as e:
            msg = str(e)
            problems.append(msg if msg.startswith(str(path)) else f"{where}: {msg}")
            continue
        if mid is not None:
            if (key, str(mid)) in seen_ids:
                problems.append(f"{where}: id {str(mid)!r} is already used by line "
                                f"{seen_ids[(key, str(mid))]}; give each message its own id")
                continue
            seen_ids[(key, str(mid))] = n
        rec = {k: v for k, v in obj.items() if k not in ("session", "turn")}
        rec["ts"] = ts.isoformat()
        rec["id"] = str(mid) if mid is not None else message_id(key, rec["ts"], obj["role"],
                                                                  obj["content"])
        records.append((key, ts, rec))
    if problems:
        raise SessionError("\n".join(problems))
    return records


def plan_import(root: Path, records: list) -> dict[str, list[str]]:
    """The lines to append per session file, leaving out ids the session already has.

    A new turn starts at each user message, numbered on from the session's last turn.
    """
    by_session: dict[str, list] = {}
    for key, ts, rec in records:
        by_session.setdefault(key, []).append((ts, rec))
    plan: dict[str, list[str]] = {}
    for key, items in by_session.items():
        session = Session(Path(root), key)
        existing = {str(o.get("id")) for o in session.lines()}
        turn = session.last_turn()
        for ts, rec in items:
            if rec["id"] in existing:
                continue
            existing.add(rec["id"])
            if rec["role"] == "user" or turn == 0:
                turn += 1
            line = {"id": rec["id"], "ts": rec["ts"], "role": rec["role"],
                    "content": rec["content"], "turn": turn}
            line.update({k: v for k, v in rec.items() if k not in line})
            plan.setdefault(month_file(key, ts), []).append(dumps(line))
    return plan
