"""What the dream reads: the archive entries a run covers, each rendered from its
session messages as one JSON line inside tags the content cannot close (what a
conversation recalled from memory marked as known already), packed into the chunks one
analyst request holds. The prompts around them are agent/dream/prompts.py.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from agent.config import Settings
from agent.llm.records import ToolCall, ToolResult
from agent.stores import archive
from agent.stores import sessions
from agent.stores.memory import MEMORY_FILES
from agent.errors import UserError

SKIP_SESSIONS = ("heartbeat/", "dream/")   # their entries are not dream input


def estimate_tokens(text: str) -> int:
    """A rough token count (4 characters a token), for sizing chunks locally."""
    return (len(text) + 3) // 4


def data_json(obj) -> str:
    """One JSON line whose strings cannot close the tag around them (no raw <, >, &)."""
    return (json.dumps(obj, ensure_ascii=False, default=str)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


# ---- input ----------------------------------------------------------------------------

@dataclass
class Selection:
    """The archive entries one run covers: those not yet consolidated, oldest first.

    `cursor` is the highest id consolidated before the run and `through` the highest
    id of the run's entries (for messages and the `Cursor:` trailer)."""
    done: archive.Consolidated
    entries: list[archive.Entry] = field(default_factory=list)   # sent to the analyst
    skipped: list[archive.Entry] = field(default_factory=list)   # heartbeat and dream sessions
    passed: list[archive.Entry] = field(default_factory=list)    # nothing asked (explicit)

    @property
    def ids(self) -> list[int]:
        return sorted(e.id for e in self.entries + self.skipped + self.passed)

    @property
    def cursor(self) -> int:
        return self.done.high

    @property
    def first(self) -> int:
        return self.ids[0] if self.ids else self.cursor + 1

    @property
    def through(self) -> int:
        # The run's own last id (an entry brought in by a sync may sort below the
        # cursor's high mark): the run is named by the ids it holds, never by the cursor.
        return self.ids[-1] if self.ids else self.cursor

    @property
    def empty(self) -> bool:
        return not self.ids


def select(root: Path, done: archive.Consolidated, max_entries: int | None = None,
           cache: SessionCache | None = None) -> Selection:
    """The entries not yet consolidated (at most `max_entries`), heartbeat and dream ones
    set aside, and so are entries whose messages other entries cover (see `covered`).
    Set-aside entries are marked consolidated too, so they wait no longer. `cache`: the
    session files read so far (the run renders the entries from them next).
    """
    sel = Selection(done)
    pending = archive.pending(root, done, limit=max_entries)
    twice = covered(root, done, pending, cache)
    for entry in pending:
        aside = entry.session.startswith(SKIP_SESSIONS) or entry.id in twice
        (sel.skipped if aside else sel.entries).append(entry)
    return sel


def covered(root: Path, done: archive.Consolidated, pending: list[archive.Entry],
            cache: SessionCache | None = None) -> set[int]:
    """Pending entries whose messages other entries cover already: two machines that
    compacted the same conversation before they synced made two entries of the same
    messages, and only one is dreamed. The compact markers of the entries' session files
    say which messages each entry covers (`ids`); an entry adding no message to those of
    the consolidated entries and of the bigger pending ones is set aside. Entries whose
    markers do not list ids are always dreamed."""
    cache = cache or SessionCache(root)
    cover: dict[int, set[str]] = {}
    # Each file once: the entries of one conversation share its month files, and going
    # through a file per entry made the selection quadratic in the entries.
    files = dict.fromkeys(str(src.get("file", "")) for entry in pending
                          for src in _sources(entry.meta))
    for file in files:
        got = cache.lines(file)
        if isinstance(got, str):
            continue
        for obj in got[0]:
            ids = obj.get("ids") if obj.get("type") == "compact" else None
            if isinstance(ids, list) and isinstance(obj.get("archive"), int):
                cover.setdefault(obj["archive"], set()).update(str(i) for i in ids)
    if not cover:
        return set()
    seen: set[str] = set()
    for entry_id, ids in cover.items():
        if entry_id in done:
            seen |= ids
    twice = set()
    mine = [e for e in pending if e.id in cover]
    for entry in sorted(mine, key=lambda e: (-len(cover[e.id]), e.id)):
        if cover[entry.id] <= seen:
            twice.add(entry.id)
        seen |= cover[entry.id]
    return twice


def _message_text(content, recalls: frozenset[str] = frozenset()) -> str:
    return sessions.message_text(content, tool=lambda b: _tool_text(b, recalls))


def _tool_text(block: ToolCall | ToolResult, recalls: frozenset[str] = frozenset()) -> str:
    if isinstance(block, ToolCall):
        return f"[used tool {block.name}: {data_json(block.input)}]"
    if block.call_id in recalls:
        return f"[{RECALLED}: {_message_text(block.content)}]"
    return f"[tool result: {_message_text(block.content)}]"


# What a turn read back from memory reached its transcript as these tools' results: it
# is marked for the analyst, so it is not taken for news (agent.dream.duplicates drops
# an edit that restates it anyway).
RECALL_TOOLS = ("memory_search", "memory_get")
RECALLED = "recalled from memory, known already, not news"


def _recalls(block: ToolCall) -> bool:
    name = block.name
    if name in RECALL_TOOLS:
        return True
    path = str((block.input or {}).get("path", "")) if name == "read_file" else ""
    return path.lstrip("./") in MEMORY_FILES or path.startswith(("memory/", "archive/"))


def recall_ids(lines: list[dict]) -> frozenset[str]:
    """The ids of the tool calls in `lines` that read memory back."""
    out = set()
    for obj in lines:
        content = obj.get("content") if obj.get("role") == "assistant" else None
        for block in sessions.blocks(content) if isinstance(content, list) else []:
            if isinstance(block, ToolCall) and _recalls(block):
                out.add(block.id)
    return frozenset(out)


def recalled(lines: list[dict]) -> list[str]:
    """Each line of what the turns in `lines` read back from memory (tool results)."""
    ids = recall_ids(lines)
    out: list[str] = []
    for obj in lines:
        content = obj.get("content") if obj.get("role") == "user" else None
        for block in sessions.blocks(content) if isinstance(content, list) else []:
            if isinstance(block, ToolResult) and block.call_id in ids:
                text = sessions.message_text(block.content)
                out.extend(line for line in text.splitlines() if line.strip())
    return out


def _sources(meta: dict) -> list[dict]:
    src = meta.get("source")
    if isinstance(src, dict):
        return [src]
    if isinstance(src, list):
        return [s for s in src if isinstance(s, dict)]
    return []


class SessionCache:
    """Session files read once per run, however many entries point into them."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._files: dict[str, tuple[list[dict], dict[str, int]] | str] = {}
        self._recalls: dict[str, bool] = {}

    def may_recall(self, rel: str) -> bool:
        """Whether the file may hold a turn that read memory back (see `recalled`): its
        bytes name a tool that reads memory, or hold an escape that could spell one. A
        file that does not need not be parsed to look (a month of a long conversation,
        parsed whole for every run of the dream that reaches into it)."""
        if rel not in self._recalls:
            from agent.fs import safe
            data = None             # not read: `lines` says why
            if rel.startswith(f"{sessions.SESSIONS}/") and ".." not in Path(rel).parts:
                with contextlib.suppress(OSError, UserError):
                    data = safe.read_bytes(self.root, rel, limit=sessions.SESSION_BYTES)
            self._recalls[rel] = data is None or b"\\u" in data or any(
                name.encode() in data for name in (*RECALL_TOOLS, "read_file"))
        return self._recalls[rel]

    def lines(self, rel: str) -> tuple[list[dict], dict[str, int]] | str:
        """The file's lines and each message id's position, or why they cannot be read."""
        if rel not in self._files:
            path = self.root / rel
            if not rel.startswith(f"{sessions.SESSIONS}/") or ".." in Path(rel).parts:
                self._files[rel] = f"{rel} is not a session file"
            elif not path.is_file():
                self._files[rel] = f"{rel} is missing"
            else:
                try:
                    lines = sessions.read_file(path, rel, self.root)
                except UserError as e:
                    self._files[rel] = str(e)
                else:
                    self._files[rel] = (lines, {str(o.get("id")): i for i, o in enumerate(lines)})
        return self._files[rel]


def covered_lines(cache: SessionCache, sources) -> list[tuple[str, dict]]:
    """(session file, line) of every session line an archive entry covers, in order
    (`sources`: its (file, first id, last id) triples); unreadable files are left out."""
    out: list[tuple[str, dict]] = []
    for file, first, through in sources:
        got = cache.lines(str(file or ""))
        if isinstance(got, str):
            continue
        lines, position = got
        start = position.get(str(first), 0)
        end = position.get(str(through), len(lines) - 1)
        out.extend((str(file), obj) for obj in lines[start:end + 1])
    return out


def raw_messages(cache: SessionCache, meta: dict, budget: int) -> tuple[list[dict], int, str]:
    """The messages an entry covers, within `budget` tokens: (messages, left out, problem)."""
    out, omitted, problems, left = [], 0, [], budget * 4
    for src in _sources(meta):
        got = cache.lines(str(src.get("file", "")))
        if isinstance(got, str):
            problems.append(got)
            continue
        lines, position = got
        start = position.get(str(src.get("from", "")), 0)
        end = position.get(str(src.get("through", "")), len(lines) - 1)
        recalls = recall_ids(lines[start:end + 1])
        for obj in lines[start:end + 1]:
            if obj.get("type") == "compact" or "role" not in obj:
                continue
            text = _message_text(obj.get("content", ""), recalls)
            if left <= 0:
                omitted += 1
                continue
            if len(text) > left:
                text = text[:left] + " [...]"
            left -= len(text)
            msg = {"ts": obj.get("ts"), "role": obj.get("role")}
            if obj.get("speaker"):
                msg["speaker"] = obj["speaker"]
            msg["text"] = text
            out.append(msg)
    return out, omitted, "; ".join(problems)


def render_entry(entry: archive.Entry, cache: SessionCache,
                 raw_tokens: int = Settings.dream_raw_tokens,
                 asks: list[str] | None = None) -> str:
    """An entry as one JSON line of data for the analyst (with `asks`: what the person
    asked to remember in it, under explicit-only learning)."""
    meta = entry.meta
    obj = {"id": entry.id, "session": entry.session, "created": meta.get("created"),
           "topic": entry.topic, "importance": meta.get("importance"), "summary": entry.summary}
    if asks is not None:
        obj["asked_to_remember"] = asks
    if raw_tokens > 0:
        msgs, omitted, problem = raw_messages(cache, meta, raw_tokens)
        obj["messages"] = msgs
        if omitted:
            obj["messages_left_out"] = omitted
        if problem:
            obj["messages_unavailable"] = problem
    return data_json(obj)


@dataclass
class Chunk:
    """Consecutive entries sent in one analyst request."""
    ids: list[int]
    lines: list[str]
    tokens: int

    @property
    def custom_id(self) -> str:
        return f"analyst-{self.ids[0]}-{self.ids[-1]}"

    @property
    def data(self) -> str:
        return "\n".join(self.lines)


def chunk(rendered: list[tuple[int, str]], budget: int) -> list[Chunk]:
    """Entries packed in order into chunks of at most `budget` tokens (an entry larger
    than the budget goes alone)."""
    chunks: list[Chunk] = []
    for entry_id, line in rendered:
        size = estimate_tokens(line) + 1
        if chunks and chunks[-1].tokens + size <= budget:
            c = chunks[-1]
            c.ids.append(entry_id)
            c.lines.append(line)
            c.tokens += size
        else:
            chunks.append(Chunk([entry_id], [line], size))
    return chunks
