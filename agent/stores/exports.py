"""Other assistants' exports as `agent import` reads them: where the files are (a folder,
a `.zip`, a single file, or a `manifest-*.json` naming several zips), which format
each is (by its content), and the conversations they hold, streamed one at a time.

A conversation read from an export is an `Imported`: its source (`chatgpt` or
`claude`), its id there, title, original times and messages, each message with the
id it has in the export (kept as the message's id in the vault, so an import twice
adds nothing and `agent why` can name it). The formats themselves are read by
agent.stores.chatgpt and agent.stores.claude; this module knows the containers.

Nothing here writes: a zip is read in place, never extracted, and refused as a whole
when a name in it escapes (`../`, an absolute path) or it would unpack to far more
than it holds (a zip bomb).

Every read is bounded, so memory stays bounded whatever the file holds
(agent.fs.boundedjson): JSON nested past `boundedjson.MAX_DEPTH` levels, one
conversation over `MAX_CONVERSATION_BYTES` of JSON or `MAX_CONVERSATION_VALUES` values,
a memories file or manifest past its size, is refused with one line naming the file.
"""

from __future__ import annotations

import contextlib
import re
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path, PurePosixPath
from typing import IO, Any, TypeVar

from agent.errors import UserError
from agent.fs import boundedjson
from agent.oneline import printable

MAX_MEMBER = 8 * 1024 ** 3          # one file of an export, unpacked
MAX_TOTAL = 32 * 1024 ** 3          # a whole zip, unpacked
BOMB_RATIO = 200                    # JSON deflates some 5-20x; 200x past BOMB_BYTES is a bomb
BOMB_BYTES = 16 * 1024 ** 2
SNIFF = 64 * 1024                   # bytes read to tell a format
# One conversation is parsed whole, so it must fit in memory: a real one is far smaller
# (a long ChatGPT thread with every branch, a few MB).
MAX_CONVERSATION_BYTES = 64 * 1024 ** 2
MAX_CONVERSATION_VALUES = 1_000_000
MAX_MEMORIES = 64 * 1024 ** 2       # memories.json, read whole
MAX_MANIFEST = 16 * 1024 ** 2
# What a broken zip raises as its member is read (a size or CRC that does not match).
_UNREADABLE = (zipfile.BadZipFile, zlib.error, EOFError, OSError)

CHATGPT, CLAUDE, JSONL = "chatgpt", "claude", "jsonl"
EMPTY = "empty"                     # a conversations file with none in it
FORMATS = (CHATGPT, CLAUDE, JSONL)
NAMES = {CHATGPT: "ChatGPT", CLAUDE: "Claude"}
MEMORIES_SESSION = "import/claude-memories"     # the archive entry of memories.json
_SPLIT = re.compile(r"^conversations(-\d{1,6})?\.json$")
_MANIFEST = re.compile(r"^manifest.*\.json$")


class ExportError(UserError):
    """An export that cannot be read as a whole; the message names the file and why."""


@dataclass
class Message:
    id: str                     # the message's id in the export
    role: str                   # user | assistant
    ts: datetime
    text: str                   # what the sender wrote
    speaker: str | None = None  # a tool's name, when a tool said it
    # What came with it that the sender did not write (an attachment's text, a file's
    # note), one text each: kept as content blocks of their own after `text`.
    attached: list[str] = field(default_factory=list)


@dataclass
class Imported:
    source: str                 # chatgpt | claude
    id: str
    title: str
    created: datetime | None
    updated: datetime | None
    messages: list[Message] = field(default_factory=list)
    model: str | None = None


@dataclass
class Skipped:
    """A conversation that could not be read: where, and why (the rest are imported)."""
    where: str
    why: str


@dataclass
class Part:
    """One file of an export: its name as shown to the person, and how to open it."""
    name: str
    open: Callable[[], IO[bytes]]
    kind: str = ""              # conversations | memories | jsonl | manifest | ""


_T = TypeVar("_T")


class Unreadable(ValueError):
    """A conversation that cannot be read (no id, a cycle, a missing parent, no mapping)."""


def wanted(value: object, kind: type[_T], why: str) -> _T:
    """`value` when it is a `kind` (and, a string, not empty); else Unreadable(`why`)."""
    if isinstance(value, kind) and value != "":
        return value
    raise Unreadable(why)


def epoch(value: object) -> datetime | None:
    """An epoch-seconds time (ChatGPT) as an aware datetime; None when absent or bad."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return datetime.fromtimestamp(float(value), UTC)
    except (OverflowError, OSError, ValueError):
        return None


def iso(value: object) -> datetime | None:
    """An ISO 8601 time (Claude) as an aware datetime; None when absent or bad."""
    if not isinstance(value, str):
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


# ---- containers ---------------------------------------------------------------------------


def parts(path: Path) -> list[Part]:
    """The files of the export at `path` (a folder, a zip or one file) that may hold
    conversations, memories or transcripts; ExportError when none does."""
    path = Path(path)
    if not path.exists():
        raise ExportError(f"{path}: no such file or folder.")
    if not path.is_dir() and not path.is_file():
        raise ExportError(f"{path} is not a regular file (a device, FIFO or socket); give "
                          f"the export's folder, zip or file.")
    if path.is_dir():
        found = _folder(path)
    elif zipfile.is_zipfile(path):
        found = _zip(path)
    else:
        found = [Part(path.name, partial(_file, path))]
    found = [p for p in found if p.kind or _own_kind(p)]
    manifests = [p for p in found if p.kind == "manifest"]
    if manifests:
        beside = path if path.is_dir() else path.parent
        found = [p for p in found if p.kind != "manifest"] + [
            q for m in manifests for q in _manifest(beside, m)]
    if not found:
        raise ExportError(f"{path}: not an export: no conversations.json, "
                          f"conversations-NNN.json, memories.json or .jsonl transcript in it.")
    return found


def _own_kind(p: Part, base: str | None = None) -> bool:
    """Name a part's kind from its file's own name (`base`, else the part's name);
    whether it is one `agent import` reads."""
    base = base or PurePosixPath(p.name).name
    if _SPLIT.match(base):
        p.kind = "conversations"
    elif base == "memories.json":
        p.kind = "memories"
    elif base.endswith(".jsonl"):
        p.kind = "jsonl"
    elif _MANIFEST.match(base):
        p.kind = "manifest"
    elif base.endswith(".json"):
        p.kind = "conversations"        # a single file given by name: told by content
    return bool(p.kind)


def _folder(path: Path) -> list[Part]:
    out: list[Part] = []
    for f in sorted(path.iterdir()):
        if f.is_file() and not f.is_symlink():
            part = Part(f"{path.name}/{f.name}", partial(_file, f))
            if _own_kind(part) and not (part.kind == "conversations"
                                        and not _SPLIT.match(f.name)):
                out.append(part)
    return out


def _zip(path: Path) -> list[Part]:
    """The export's files in a zip, after checking every name and size in it."""
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError) as e:
        raise ExportError(f"{path.name}: not a readable zip ({e}).") from None
    total = 0
    for info in infos:
        name = info.filename
        pure = PurePosixPath(name.replace("\\", "/"))
        if pure.is_absolute() or ".." in pure.parts or re.match(r"^[A-Za-z]:", name):
            raise ExportError(f"{path.name}: the name {name[:100]!r} in the zip escapes its "
                              f"folder; an export never holds one, so nothing was imported.")
        total += info.file_size
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > MAX_MEMBER or total > MAX_TOTAL or (
                info.file_size > BOMB_BYTES and ratio > BOMB_RATIO):
            raise ExportError(f"{path.name}: {name[:100]} would unpack to "
                              f"{info.file_size:,} bytes from {info.compress_size:,} "
                              f"(a zip bomb, not an export); nothing was imported.")
    out = []
    for info in infos:
        if info.is_dir():
            continue
        part = Part(f"{path.name}:{info.filename}", partial(_member, path, info))
        # The member's own name says what it is (claude-export.zip:memories.json is
        # memories), not the part's, which names the zip too.
        base = PurePosixPath(info.filename).name
        if _own_kind(part, base) and not (part.kind == "conversations"
                                          and not _SPLIT.match(base)):
            out.append(part)
    return out


def _file(path: Path) -> IO[bytes]:
    return open(path, "rb")


def _member(path: Path, info: zipfile.ZipInfo) -> IO[bytes]:
    """One member of a zip, open; closing it closes the zip (which it holds open: a
    ZipFile closed while a member is open keeps the file until the member closes)."""
    with zipfile.ZipFile(path) as zf:
        return zf.open(info)


def _manifest(folder: Path, part: Part) -> list[Part]:
    """The parts of the zips a `manifest-*.json` names (Claude's export in several
    files), each looked for beside the manifest."""
    data = read_json(part, MAX_MANIFEST, what="a manifest")
    names: list[str] = []

    def walk(x: object) -> None:
        if isinstance(x, str) and x.lower().endswith(".zip"):
            names.append(PurePosixPath(x).name)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(data)
    out = []
    for name in dict.fromkeys(names):
        z = folder / name
        if not z.is_file():
            raise ExportError(f"{part.name} names {name}, which is not beside it in "
                              f"{folder}; put every zip of the export in one folder.")
        out += _zip(z)
    return out


# ---- telling and streaming -----------------------------------------------------------------


@contextlib.contextmanager
def opened(part: Part) -> Iterator[IO[bytes]]:
    """The part's bytes, a UTF-8 byte-order mark left out (some editors add one); a zip
    member that cannot be read (its sizes or CRC lie) is an ExportError naming it."""
    try:
        with part.open() as f:
            if f.read(3) != b"\xef\xbb\xbf":
                f.seek(0)            # a zip member seeks too (by reading again from its start)
            yield f
    except _UNREADABLE as e:
        raise ExportError(f"{part.name}: cannot be read ({e}); nothing was imported "
                          f"from it.") from None


def sniff(part: Part) -> str | None:
    """Which format a conversations file is, from its first objects' keys: chatgpt,
    claude, EMPTY (an empty array: either) or None (not one we read)."""
    with opened(part) as f:
        head = f.read(SNIFF)
    if head.strip() == b"[]":
        return EMPTY
    keys = set(re.findall(rb'"([a-z_]{2,30})"\s*:', head))
    if {b"mapping", b"current_node"} & keys:
        return CHATGPT
    if {b"chat_messages", b"uuid"} <= keys or b"chat_messages" in keys:
        return CLAUDE
    return None


def items(part: Part) -> Iterator[object]:
    """The elements of the part's top-level JSON array, one at a time (a 1 GB export is
    never in memory at once, and one element is bounded: see the module); ExportError
    naming the part for a truncated file, bytes that are not UTF-8, a conversation past
    the bounds or anything else that is not JSON."""
    import ijson

    with opened(part) as f:
        reader = boundedjson.Reader(f, max_item_bytes=MAX_CONVERSATION_BYTES,
                                    max_item_values=MAX_CONVERSATION_VALUES)
        n = 0
        try:
            for obj in ijson.items(reader, "item", use_float=True):
                reader.took_item()
                n += 1
                yield obj
        except ijson.JSONError as e:
            raise ExportError(f"{part.name}: {_json_problem(e)}; nothing was imported "
                              f"from it.") from None
        except boundedjson.TooDeep as e:
            raise ExportError(f"{part.name}: {e}; nothing was imported from it.") from None
        except boundedjson.TooBig as e:
            raise ExportError(f"{part.name}: conversation {n + 1} {e} (a real one is a few "
                              f"MB); nothing was imported from it.") from None


def _json_problem(e: Exception) -> str:
    text = str(e)
    if "UTF8" in text or "utf-8" in text.lower():
        return "holds bytes that are not UTF-8"
    if "premature EOF" in text or "Incomplete" in text:
        return "ends mid-way (a truncated or partly downloaded file)"
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return f"is not valid JSON ({first})"


def read_json(part: Part, limit: int = MAX_MEMORIES, *, what: str = "a memories file"
              ) -> Any:
    """A small JSON file of an export (memories.json, a manifest), whole, within its
    bounds of size, depth and values."""
    with opened(part) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ExportError(f"{part.name}: over {limit // 1024 // 1024} MB; not {what}.")
    try:
        return boundedjson.loads(data.decode("utf-8"),
                                 max_values=MAX_CONVERSATION_VALUES)
    except UnicodeDecodeError:
        raise ExportError(f"{part.name}: holds bytes that are not UTF-8.") from None
    except ValueError as e:                 # boundedjson's TooDeep and TooBig too
        raise ExportError(f"{part.name}: is not valid JSON ({e}).") from None


def conversation_of(root: Path, key: str) -> dict[str, Any] | None:
    """What an imported conversation's session keeps of it (its first line's
    `conversation`: from, id, title, created, updated, model), or None."""
    from agent.stores import sessions

    if not key.startswith("import/"):
        return None
    files = sessions.Session(root, key).files()
    if not files:
        return None
    try:
        with open(files[0], "rb") as f:
            first = f.readline()
        about = sessions.parse_line(first, key, 1).get("conversation")
    except (OSError, UserError):
        return None
    return about if isinstance(about, dict) else None


def title_of(root: Path, key: str) -> str | None:
    """The title an imported conversation had, without the escapes a terminal would
    obey (a title comes from elsewhere: an export, a sync)."""
    title = (conversation_of(root, key) or {}).get("title")
    return printable(title) if isinstance(title, str) else None


def title(value: object) -> str:
    """A conversation's title as an import keeps it: one line of at most 200
    characters, no control characters; "(untitled)" when it has none."""
    one = " ".join(printable(value).split())[:200] if isinstance(value, str) else ""
    return one or "(untitled)"
