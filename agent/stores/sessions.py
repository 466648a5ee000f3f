"""Session transcripts: `sessions/<channel>/<chat>/YYYY-MM.jsonl`, append-only.

One JSON object per line with at least `id`, `ts` (ISO 8601 with offset), `role`,
`content` and `turn`. Compaction appends a marker line
`{"type": "compact", "archive": 42, "through": "<message id>", "ids": [...]}` naming
the messages it archived; the active window is every message no marker covers (a
marker of before `ids` existed covers everything up to its `through`), so the lines of
two machines that wrote to one session and compacted it before they synced lose none.
This module knows nothing of git or models: it reads files and hands back the lines to
append.

A message's `content` is a string, or a list of blocks in the shape the agent has always
stored (that of Anthropic's Messages API: `{"type": "text", "text"}`, `{"type":
"tool_use", "id", "name", "input"}`, `{"type": "tool_result", "tool_use_id", "content",
"is_error"}`); this module is the one place that reads and writes that shape: `blocks()`
gives a stored content as the seam's records (agent/llm/records.py), `stored()` the
records as they are stored, and `Line.new` takes records.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agent.errors import UserError
from agent.fs import boundedjson
from agent.llm.records import Block, CacheHint, Opaque, Text, ToolCall, ToolResult

SESSIONS = "sessions"
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}")     # fullmatch: no newline
_GROUP = re.compile(r"-[0-9]{1,99}")     # a chat may be a negative number (a Telegram group)
ROLES = ("user", "assistant", "system")



class SessionError(UserError):
    """Bad session data; the message names the file and line."""


# What came in by `agent import`: the sessions of another assistant's export live under
# `import/`; a line of our own JSONL format, imported into any session (`cli/default`,
# `telegram/42`), says `"imported": true`. Either way it is history told by a file, not
# the person's chat: what the dream learns from it waits for review.
IMPORTS = "import/"
IMPORTED = "imported"
# Of a message that came with attachments (a Claude export), how many of its last
# content blocks came attached: the sender did not type them.
ATTACHED = "attached"
# What a cron job's run says on its transcript line: the job's id (nobody typed it).
JOB = "job"


def imported(session: str, obj: object) -> bool:
    """Whether the session line `obj` of `session` came in by an import."""
    return session.startswith(IMPORTS) or (isinstance(obj, dict) and obj.get(IMPORTED) is True)


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


def dumps(obj: object) -> str:
    """One JSONL line: compact, UTF-8 kept readable."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


FIELDS = ("id", "ts", "role", "content", "turn")


@dataclass
class Line:
    """One message of a session: the one way to make a message line or read one back.

    On disk it is a JSON object whose keys come in this order: `id`, `ts`, `role`,
    `content`, `turn` (left out when None, as a delivered reply has none), then every
    other key (`model`, `error`, `interrupted`, `injected`, `speaker`, `source`, ...) in
    `extra`, in the order it was written. For every line the agent has written,
    `Line.read(obj).dumps()` gives back its bytes: the format of existing vaults is the
    format (tests/test_session_lines.py holds lines of each kind).
    """
    id: str | None
    ts: str | None
    role: str
    content: str | list
    turn: int | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def new(cls, turn: int | None, role: str, content: str | Sequence[Block], now: datetime, *,
            id: str, **extra) -> "Line":
        """A line written now (`ts` to the second, with its offset), its content a string
        or the seam's blocks (stored as the session files hold them)."""
        return cls(id, now.isoformat(timespec="seconds"), role, stored(content), turn,
                   dict(extra))

    @classmethod
    def read(cls, obj) -> "Line | None":
        """The message a parsed session line holds, or None for a compact marker, a
        receipt or anything else that is not a message."""
        if not is_message(obj):
            return None
        turn = obj.get("turn")
        return cls(obj.get("id"), obj.get("ts"), obj["role"], obj.get("content", ""),
                   turn if isinstance(turn, int) and not isinstance(turn, bool) else None,
                   {k: v for k, v in obj.items() if k not in FIELDS})

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"id": self.id, "ts": self.ts, "role": self.role,
                               "content": self.content}
        if self.turn is not None:
            out["turn"] = self.turn
        out.update(self.extra)
        return out

    def dumps(self) -> str:
        """The line as it is appended to its month file (without the newline)."""
        return dumps(self.to_dict())

    @property
    def text(self) -> str:
        """The message's words (see message_text)."""
        return message_text(self.content)

    @property
    def blocks(self) -> list[Block]:
        """The content as the seam's records (see blocks)."""
        return blocks(self.content)

    @property
    def speaker(self) -> str | None:
        """Who said it: the `speaker` a group chat or an import names, else the role."""
        who = self.extra.get("speaker")
        if isinstance(who, str) and who:
            return who
        return self.role if isinstance(self.role, str) else None

    @property
    def ts_text(self) -> str | None:
        return self.ts if isinstance(self.ts, str) else None


# ---- the stored content of a message <-> the seam's records ----------------------------


def _cache_of(b: dict) -> CacheHint | None:
    mark = b.get("cache_control")
    if not isinstance(mark, dict):
        return None
    return CacheHint(mark["ttl"] if isinstance(mark.get("ttl"), str) else None)


def _block(b: Any) -> Block | None:
    if isinstance(b, str):
        return Text(b)
    if not isinstance(b, dict):
        return None
    kind = b.get("type")
    if kind == "text":
        return Text(b["text"], _cache_of(b)) if isinstance(b.get("text"), str) else None
    if kind == "tool_use" and isinstance(b.get("input", {}), dict):
        return ToolCall(str(b.get("id", "")), str(b.get("name", "")), b.get("input", {}),
                        _cache_of(b))
    if kind == "tool_result":
        inner = b.get("content", "")
        return ToolResult(str(b.get("tool_use_id", "")),
                          inner if isinstance(inner, str) else blocks(inner),
                          bool(b.get("is_error")), _cache_of(b))
    return Opaque(b)


def blocks(content: Any) -> list[Block]:
    """A stored content as the seam's records: a string is one text block; a block the
    agent does not read (an image, a kind of a newer format) is `Opaque`, kept whole;
    a cache mark (older versions stored some) is a CacheHint."""
    if isinstance(content, str):
        return [Text(content)]
    if not isinstance(content, list):
        return []
    return [x for x in map(_block, content) if x is not None]


def _stored_block(b: Block) -> Any:
    out: dict[str, Any]
    if isinstance(b, Text):
        out = {"type": "text", "text": b.text}
    elif isinstance(b, ToolCall):
        out = {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
    elif isinstance(b, ToolResult):
        out = {"type": "tool_result", "tool_use_id": b.call_id, "content": stored(b.content)}
        if b.is_error:
            out["is_error"] = True
    else:
        return b.data
    if b.cache is not None:
        out["cache_control"] = {"type": "ephemeral", **({"ttl": b.cache.ttl} if b.cache.ttl
                                                        else {})}
    return out


def stored(content: str | Sequence[Block]) -> str | list:
    """Records as they are stored (a string stays one). A turn's transcript holds no
    cache hint; the dream's requests in flight keep theirs (agent/dream/state.py)."""
    if isinstance(content, str):
        return content
    return [_stored_block(b) for b in content]


def message_text(content, tool=None, sep: str = "\n") -> str:
    """A message's text: its content when a string, else its text blocks joined by `sep`
    (a stored content, or the seam's records).

    `tool(block)` renders a ToolCall or ToolResult record as text (they are left out
    when it is None); empty parts are dropped. The one reading of a
    message's words: search indexes it, compaction and the dream quote it.
    """
    if isinstance(content, str):
        return content
    parts = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Text):          # records, as a tool result may hold
            parts.append(block.text)
        elif isinstance(block, (ToolCall, ToolResult)):
            if tool is not None:
                parts.append(tool(block))
        elif not isinstance(block, dict):
            continue
        elif block.get("type") == "text":
            if isinstance(block.get("text"), str):
                parts.append(block["text"])
        elif tool is not None and block.get("type") in ("tool_use", "tool_result"):
            record = _block(block)
            if isinstance(record, (ToolCall, ToolResult)):
                parts.append(tool(record))
    return sep.join(p for p in parts if p)


SESSION_BYTES = 256 * 1024 * 1024     # one month of one session, read whole


def _bytes(path: Path, rel: str | None, root: Path | None) -> bytes:
    """A session file's bytes through the vault's one safe read (no link out, no FIFO)."""
    from agent.fs import safe

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
        boundedjson.check(text)             # (a walk over a deeper line would recurse)
        obj = _DECODER.decode(text)
    except (RecursionError, boundedjson.TooDeep):
        raise SessionError(f"{name}:{n}: nested too deeply; fix or remove the line") from None
    except ValueError as e:
        raise SessionError(f"{name}:{n}: not valid JSON ({getattr(e, 'msg', e)}); fix or "
                           f"remove the line") from None
    if not isinstance(obj, dict):
        raise SessionError(f"{name}:{n}: a session line must be a JSON object")
    return obj


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)     # one, not one a line


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

    def last_line(self) -> dict | None:
        """The last message of the session (compact markers skipped, however long their
        line), read from the end of the newest file back (cheap)."""
        for path in reversed(self.files()):
            rel = path.relative_to(self.root).as_posix()
            try:
                for _, raw in raw_backward(self.root, rel):
                    if is_marker_raw(raw):
                        continue
                    try:
                        obj = boundedjson.loads(raw)
                    except ValueError:
                        continue
                    if isinstance(obj, dict):
                        return obj
            except FileNotFoundError:
                continue
        return None

    def last_turn(self) -> int:
        for f in reversed(self.files()):
            for _, obj in read_backward(f, f.relative_to(self.root).as_posix(), self.root):
                if isinstance(obj.get("turn"), int) and not isinstance(obj.get("turn"), bool):
                    return obj["turn"]
        return 0


def is_marker_raw(raw: bytes) -> bool:
    # A message's text holding these words is JSON-escaped (\"type\"), so never matches.
    return b'"type":"compact"' in raw[:200] or (
        b'"compact"' in raw[:200] and b'"type"' in raw[:200] and raw.lstrip().startswith(b'{"'))


TAIL_BLOCK = 64 * 1024


def raw_backward(root: Path, rel: str):
    """(offset, raw bytes) of a session file's lines from its last to its first, read
    in blocks from the end (a block doubles while one line is longer), not whole."""
    from agent.fs import safe

    fd, size = safe.open_file(root, rel, limit=None)
    with os.fdopen(fd, "rb") as f:
        pos, buf, end, block = size, b"", 0, TAIL_BLOCK
        while True:
            cut = buf.rfind(b"\n", 0, max(end - 1, 0))
            if cut >= 0:
                raw = buf[cut + 1:end]
                end = cut + 1
                if raw.strip():
                    yield pos + cut + 1, raw.rstrip(b"\n")
                continue
            if pos == 0:
                if buf[:end].strip():
                    yield 0, buf[:end].rstrip(b"\n")
                return
            n = min(block, pos)
            pos -= n
            f.seek(pos)
            buf = f.read(n) + buf[:end]
            end = len(buf)
            block = min(block * 2, 64 * 1024 * 1024)


def read_forward(root: Path, rel: str, offset: int):
    """(offset, object) of a session file's lines from byte `offset` to its end (a torn
    last line left out)."""
    from agent.fs import safe

    fd, size = safe.open_file(root, rel, limit=None)
    with os.fdopen(fd, "rb") as f:
        f.seek(offset)
        data = f.read(min(max(size - offset, 0), SESSION_BYTES))
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            return                         # torn: the vault lock's repair sets it aside
        raw = data[pos:nl]
        if raw.strip():
            yield offset + pos, _parse_at(root, rel, raw, offset + pos)
        pos = nl + 1


def _parse_at(root: Path, rel: str, raw: bytes, offset: int) -> dict:
    try:
        return parse_line(raw, rel, 0)
    except SessionError:
        pass
    # Only for the error: the line's number (counting costs a read of the file's start).
    n = _bytes(root / rel, rel, root)[:offset].count(b"\n") + 1
    return parse_line(raw, rel, n)


def read_backward(path: Path, rel: str, root: Path | None = None):
    """(byte offset, object) of a session file's lines from its last line to its first:
    the one backward reader of sessions, for the window, compaction and serve's receipts."""
    path = Path(path)
    if root is None:
        root, rel = path.parent, path.name
    first = True
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise FileNotFoundError(2, "no such session file", str(path)) from None
    for off, raw in raw_backward(root, rel):
        last, first = first, False
        try:
            obj = _parse_at(root, rel, raw, off)
        except SessionError:
            if last and off + len(raw) >= size:
                continue   # a torn last line: the vault lock's repair sets it aside
            raise
        yield off, obj


def turn_lines(root: Path, rel: str, turn) -> list[Line]:
    """The messages of turn `turn` in one session file (through the safe reader; lines
    of other turns are skipped before they are parsed). FileNotFoundError when the file
    is gone, UnsafeFile when it is not one the agent reads."""
    from agent.fs import safe

    needle = f'"turn":{turn}'.encode()
    out = []
    fd, _ = safe.open_file(Path(root), rel, limit=None)
    with os.fdopen(fd, "rb") as f:
        for raw in f:
            if needle not in raw.replace(b" ", b""):
                continue
            try:
                line = Line.read(boundedjson.loads(raw))
            except ValueError:
                continue
            if line is not None and str(line.turn) == str(turn):
                out.append(line)
    return out


def list_sessions(root: Path) -> list[str]:
    base = Path(root) / SESSIONS
    if not base.is_dir():
        return []
    return sorted(f"{c.name}/{s.name}" for c in base.iterdir() if c.is_dir()
                  for s in c.iterdir() if s.is_dir())
