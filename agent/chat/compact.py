"""Compaction: the oldest part of a conversation window becomes an archive entry.

When a session's window passes `window_tokens` (agent.toml [chat]), its oldest
messages, cut just before a user message so no exchange is split, are summarised by
the model (structured output: topic, summary, importance) into
`archive/YYYY/MM/<id>.md`, and a marker line
`{"type": "compact", "archive": <id>, "through": "<last message id>", "ids": [...]}`
(the ids of the messages it covers) is appended to the session; both land in one commit `archive(<session>): <topic>`. The messages stay
in the session file; the window simply starts after them.

Archive frontmatter written here: `id`, `session`, `created` (ISO 8601), `source`
(`{file, from, through}`: the session file and the first and last message ids; a list
of those when the part spans two month files), `topic`, `importance` — a number from
0 to 1 (0.1 small talk, 0.5 useful context, 0.9 lasting facts or decisions about the
person) — and `tokens` (the estimated size of the messages it covers).

Every request is bounded: a part over CHUNK_TOKENS (50,000 tokens) is archived as
several entries, one request each, and a message over `[chat] max_message_tokens`
is shown to the summariser as its head and tail. Each marker also records where the
window it leaves starts (`start`: file, byte offset, first id), so reading the window
never goes back through the history.

History imported beyond the window (`agent import`) is not sent whole: the import
appends a marker without an archive entry whose `backlog` says which older messages
still wait to be archived; `compact_backlog` archives them one chunk at a time (a
turn does one chunk after its reply, `agent serve` works through them in the
background, `agent archive` all of them, with progress).

If summarising fails the window is left as it was: compaction is tried again after
the next turn (or by `agent archive`).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from agent.chat import prompt as context
from agent.chat.subjects import shorten
from agent.config import load_settings
from agent.errors import UserError
from agent.llm import Provider, ProviderError, models_for
from agent.llm.records import MAX_TOKENS, Message, Request, ToolCall, ToolResult
from agent.llm.structured import bound, runaway, schema_of
from agent.stores import archive, sessions
from agent.stores import window
from agent.vault.change import MODEL, SESSION, TOKENS, Change, tokens
from agent.fs import boundedjson
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from agent.vault.repo import Vault

log = logging.getLogger("agent.chat.compact")

KEEP_SHARE = 0.5               # after compaction the window holds at most half its budget
CHUNK_TOKENS = 50_000          # the most tokens of conversation one summary request holds
MESSAGE_TOKENS = 8_000         # of one message shown to the summariser (head and tail)
TOOL_RESULT_CHARS = 600        # of each tool result shown to the summariser
SUMMARY_MAX_TOKENS = 2000
# What the schema lets a reply hold (agent.llm.structured: a local server's grammar ends
# the string there, so a small model's summary cannot run on to SUMMARY_MAX_TOKENS; about
# 250 words are asked for). Together well under SUMMARY_MAX_TOKENS tokens of JSON.
TOPIC_CHARS = 100
SUMMARY_CHARS = 1800

class Summary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: str = Field(description="What the conversation was about, in at most 8 words.",
                       json_schema_extra=bound(TOPIC_CHARS))
    summary: str = Field(description="What a reader needs later: facts, decisions, plans, "
                                     "preferences, open questions, with absolute dates.",
                         json_schema_extra=bound(SUMMARY_CHARS))
    importance: float = Field(description="0 to 1: 0.1 small talk, 0.5 useful context, "
                                          "0.9 lasting facts or decisions about the person.")


SCHEMA = schema_of(Summary)

SYSTEM = """\
You turn part of a conversation between a person and their AI assistant into an entry
of the assistant's archive, which is searched later and consolidated into long-term
memory. Answer with JSON only:
- topic: what the conversation was about, at most 8 words;
- summary: everything worth finding again - facts about the person and their world,
  decisions, plans, preferences, commitments and open questions - in short plain
  sentences (bullets welcome), with absolute dates (YYYY-MM-DD, from the timestamps)
  instead of "today" or "tomorrow"; leave out greetings and small talk; at most about
  250 words;
- importance: 0 to 1 (0.1 small talk, 0.5 useful context, 0.9 lasting facts or
  decisions about the person)."""


class CompactError(UserError):
    """Summarising failed; the window is unchanged and compaction is retried later."""


def _turn_start(msg: dict) -> bool:
    # A message injected mid-turn (agent.chat.inbox) belongs to the turn it joined.
    if msg.get("role") != "user" or msg.get("injected"):
        return False
    c = msg.get("content")
    if isinstance(c, str):
        return True
    return isinstance(c, list) and not any(isinstance(b, ToolResult)
                                           for b in sessions.blocks(c))


def plan_cut(window: list[dict], budget: int, force: bool = False,
             cap: int | None = None) -> int:
    """How many of the window's oldest messages to compact (0: none).

    The rest starts at a user message and, when possible, fits in half the budget; with
    force, the whole window.
    """
    if force:
        return len(window)
    sizes = [context.estimate_tokens([m], cap) for m in window]
    if sum(sizes) <= budget:
        return 0
    starts = [i for i in range(1, len(window)) if _turn_start(window[i])]
    if not starts:
        return 0
    for i in starts:
        if sum(sizes[i:]) <= budget * KEEP_SHARE:
            return i
    return starts[-1]


def _tool_text(b: ToolCall | ToolResult) -> str:
    if isinstance(b, ToolCall):
        args = json.dumps(b.input, ensure_ascii=False)
        return f"[called {b.name}({args[:TOOL_RESULT_CHARS]})]"
    res = b.content if isinstance(b.content, str) else \
        json.dumps(sessions.stored(b.content), ensure_ascii=False)
    return f"[tool result: {res[:TOOL_RESULT_CHARS]}]"


def transcript(messages: list[dict]) -> str:
    """The messages as plain text for the summariser."""
    out = []
    for m in messages:
        when = str(m.get("ts", ""))[:16].replace("T", " ")
        who = m.get("speaker") or m.get("role", "?")
        text = sessions.message_text(m.get("content"), tool=_tool_text)
        if len(text) > MESSAGE_TOKENS * 4:
            head, tail = MESSAGE_TOKENS * 3, MESSAGE_TOKENS
            text = (f"{text[:head]}\n[... {len(text) - head - tail:,} characters left out ...]\n"
                    f"{text[-tail:]}")
        if m.get("interrupted"):
            text += " [interrupted]"
        if text.strip():
            out.append(f"[{when}] {who}: {text}")
    return "\n\n".join(out)


def summarise(provider: Provider, models: list[str], session: str, part: list[dict],
              max_tokens: int, root=None):
    """(topic, summary, importance, model used, usage) for `part`; CompactError on failure.
    With the vault's `root`, the request passes the secret filter (a synced transcript
    never did)."""
    body = f"Session: {session}\n\n<conversation>\n{transcript(part)}\n</conversation>"
    if root is not None:
        from agent import redact
        body = redact.door(root, body)[0]
    try:
        msg = provider.create(models, Request([Message("user", body)], max_tokens,
                                              system=SYSTEM, schema=SCHEMA), parse=Summary)
    except ProviderError as e:
        raise CompactError(f"Could not summarise {session} for the archive: {e}") from None
    text = msg.text
    try:
        data = boundedjson.loads(text)
    except ValueError:
        if msg.stop_reason == MAX_TOKENS:
            raise CompactError(f"Could not summarise {session}: the model's answer was cut "
                               f"off at {max_tokens:,} tokens before its JSON ended; a "
                               f"server that takes a response schema (json_schema) ends it "
                               f"in time") from None
        raise CompactError(f"Could not summarise {session}: the model's answer was not "
                           f"JSON ({text[:80]!r})") from None
    topic = data.get("topic") if isinstance(data, dict) else None
    summary = data.get("summary") if isinstance(data, dict) else None
    importance = data.get("importance") if isinstance(data, dict) else None
    if not isinstance(topic, str) or not topic.strip() or not isinstance(summary, str) \
            or not summary.strip():
        raise CompactError(f"Could not summarise {session}: the answer lacks a topic or "
                           f"a summary ({text[:80]!r})")
    ran = runaway({"topic": topic, "summary": summary})
    if ran:
        table = msg.model.split("/", 1)[0] if "/" in (msg.model or "") else "NAME"
        raise CompactError(f"Could not summarise {session}: the model's answer {ran[2:]}; "
                           f"a repeat_penalty or frequency_penalty in [providers.{table}] "
                           f"of agent.toml keeps a small local model from it")
    if not isinstance(importance, (int, float)) or isinstance(importance, bool):
        importance = 0.5
    importance = float(importance)
    if importance > 1:      # a model answering on a 1-5 or 1-10 scale
        importance = importance / (5 if importance <= 5 else 10)
    importance = round(min(max(importance, 0.0), 1.0), 2)
    return " ".join(topic.split()), summary.strip(), importance, msg.model, msg.usage.as_dict()


def _source(part: list[dict], files: list[str]):
    ranges: list[dict] = []
    for msg, rel in zip(part, files):
        mid = msg.get("id")
        if mid is None:
            continue
        if ranges and ranges[-1]["file"] == rel:
            ranges[-1]["through"] = str(mid)
        else:
            ranges.append({"file": rel, "from": str(mid), "through": str(mid)})
    return ranges[0] if len(ranges) == 1 else ranges


def chunk_end(part: list[dict]) -> int:
    """How many of `part`'s messages the first summary request takes: all that fit in
    CHUNK_TOKENS, cut before a user message when one is in reach, at least one."""
    total, end, best = 0, 0, 0
    for i, m in enumerate(part):
        size = len(transcript([m])) // 4 + 10
        if i and total + size > CHUNK_TOKENS:
            break
        total += size
        end = i + 1
        if i + 1 < len(part) and _turn_start(part[i + 1]):
            best = i + 1
    return best if best and end < len(part) and best >= end // 2 else end


def _marker_line(marker: dict, rel_size: int, start_here: bool) -> str:
    """The marker's JSON line; with start_here, its `start` points just past itself (the
    window it leaves is empty), which takes the line's own length."""
    if not start_here:
        return sessions.dumps(marker)
    offset = rel_size
    for _ in range(5):
        marker["start"]["offset"] = offset
        line = sessions.dumps(marker)
        new = rel_size + len(line.encode()) + 1
        if new == offset:
            break
        offset = new
    return line


def marker_file(root, session: str, now: datetime) -> str:
    """Where a marker goes: this month's file, or the session's last file when that is
    later (messages dated ahead of this machine's clock: an import from another time
    zone, a clock set wrong). The last marker is looked for from the last file back, so
    one written into an earlier file would never be found, and the same part of the
    history would be archived again and again."""
    rel = sessions.month_file(session, now)
    files = sessions.Session(root, session).files()
    last = f"{sessions.session_dir(session)}/{files[-1].name}" if files else rel
    return max(rel, last)


def _append_marker(vault: Vault, session: str, now: datetime, marker: dict,
                   start_here: bool) -> None:
    rel = marker_file(vault.root, session, now)
    path = vault.root / rel
    size = path.stat().st_size if path.exists() else 0
    if start_here:
        marker["start"] = {"file": rel, "offset": 0, "id": None}
    vault.append_lines(rel, [_marker_line(marker, size, start_here)])


def _imported(part: list[dict]) -> dict:
    """`imported: true` for an archive entry covering a line a JSONL import brought into
    a session of the person's: the dream holds what it learns from it for review."""
    return {sessions.IMPORTED: True} if any(m.get(sessions.IMPORTED) is True for m in part) \
        else {}


def compact_session(vault: Vault, provider: Provider, session: str, now: datetime, *, force: bool = False,
                    settings=None, budget: int | None = None,
                    pause: Callable[[], None] | None = None) -> int | None:
    """Compact the window's oldest part (with force, the whole window) into an archive
    entry; returns its id, None when there is nothing to compact; CompactError when the
    summary could not be made (nothing changed). One call archives at most CHUNK_TOKENS:
    call again while the window is over its budget (`compact_until`).

    `pause()` runs once the summary is made, before the vault lock is taken for the
    entry's commit: `agent serve` waits there while a person's turn runs."""
    from agent.search import index

    settings = settings or load_settings(vault.root)
    sessions.check_key(session)
    w = window.read_window(vault.root, session)
    n = plan_cut(w.messages, budget or settings.window_tokens, force,
                 cap=settings.max_message_tokens)
    n = chunk_end(w.messages[:n]) if n else 0
    part, files = w.messages[:n], w.files[:n]
    while part and part[-1].get("id") is None:
        part, files = part[:-1], files[:-1]
    if not part:
        return None
    n = len(part)
    topic, summary, importance, used, usage = summarise(
        provider, models_for(None, settings), session, part, SUMMARY_MAX_TOKENS, vault.root)
    if pause is not None:
        pause()

    with vault.locked():
        # Another process may have compacted this window meanwhile.
        now_w = window.read_window(vault.root, session)
        if not now_w.messages or now_w.messages[0].get("id") != part[0].get("id"):
            return None
        entry_id = archive.new_id(vault.root, now)
        meta = {"session": session, **_imported(part),      # in the head the dream reads
                "created": now.isoformat(timespec="seconds"),
                "source": _source(part, files), "topic": topic, "importance": importance,
                "tokens": context.estimate_tokens(part)}
        vault.write_text(archive.entry_path(entry_id, now), archive.render(entry_id, meta, summary))
        # The ids it covers: after a sync, lines of another machine may sit among them
        # (see window.read_window).
        marker = {"type": "compact", "archive": entry_id, "through": str(part[-1]["id"]),
                  "ids": [str(m["id"]) for m in part if m.get("id") is not None]}
        kept = n < len(now_w.messages) and n < len(now_w.offsets)
        if kept:
            marker["start"] = {"file": now_w.files[n], "offset": now_w.offsets[n],
                               "id": now_w.messages[n].get("id")}
        backlog = (now_w.marker or {}).get("backlog")
        if isinstance(backlog, dict):
            marker["backlog"] = backlog
        _append_marker(vault, session, now, marker, start_here=not kept)
        vault.commit(Change("archive", shorten(topic), scope=session,
                            trailers={SESSION: session, "Archive": str(entry_id),
                                      MODEL: used, TOKENS: tokens(usage)}))
    index.refresh(vault, after_commit=True)
    return entry_id


def compact_until(vault: Vault, provider: Provider, session: str, now: datetime, *, settings=None,
                  budget: int | None = None, force: bool = False, on_entry=None,
                  pause: Callable[[], None] | None = None) -> list[int]:
    """Compact chunk after chunk until the window fits `budget` (with force: is empty);
    the archive entries made. `on_entry(entry_id)` hears of each as it is made; `pause`
    as compact_session's."""
    settings = settings or load_settings(vault.root)
    made: list[int] = []
    budget = budget or settings.window_tokens
    while True:
        if not force:
            w = window.read_window(vault.root, session)
            if context.estimate_tokens(w.messages, settings.max_message_tokens) <= budget:
                return made
        entry = compact_session(vault, provider, session, now, force=force,
                                settings=settings, budget=budget, pause=pause)
        if entry is None:
            return made
        made.append(entry)
        if on_entry is not None:
            on_entry(entry)


# ---- imported history beyond the window -------------------------------------------------


def _position(rels: list[str], rel: str, offset: int) -> tuple[int, int]:
    return (rels.index(rel) if rel in rels else len(rels), offset)


def mark_backlog(vault: Vault, session: str, settings, appended: dict[str, int]) -> int:
    """After an import (under the vault lock, before its commit): when the session's window
    is over its budget, append a marker that starts the window at its newest messages
    and leaves the older ones waiting to be archived (`backlog`); returns how many
    messages the window keeps (0: no marker was needed).

    `appended` maps each session file the import wrote to its size before (where its
    new lines begin). Only the window's bytes are read."""
    root = vault.root
    files = sessions.Session(root, session).files()
    rels = [f.relative_to(root).as_posix() for f in files]
    if not rels:
        return 0
    keep_budget = int(settings.window_tokens * KEEP_SHARE)
    total, kept, cut, before = 0, 0, None, None
    for rel in reversed(rels):
        for off, obj in sessions.read_backward(root / rel, rel, root):
            if obj.get("type") == "compact":
                continue
            total += context.estimate_tokens([obj], settings.max_message_tokens)
            if total > keep_budget and cut is not None:
                before = obj
                break
            if _turn_start(obj):
                cut, kept_at = (rel, off, obj), kept + 1
            kept += 1
        if before is not None:
            break
    if before is None or cut is None or before.get("id") is None:
        return 0                            # all of it fits the window
    found = window.last_marker(root, files)
    first: tuple[str, int] = (rels[0], 0)
    if found is not None:
        old = found[0]
        back = old.get("backlog") if isinstance(old.get("backlog"), dict) else None
        start = window.start_of(old)
        if back is not None and isinstance(back.get("file"), str):
            first = (back["file"], int(back.get("offset", 0)))
        elif start is not None:
            first = (start["file"], start["offset"])
        else:
            return 0     # a marker of before starts were recorded: left to compaction
    for rel, size in appended.items():
        if rel in rels and _position(rels, rel, size) < _position(rels, *first):
            first = (rel, size)
    rel, off, obj = cut
    if _position(rels, *first) >= _position(rels, rel, off):
        return 0
    marker = {"type": "compact", "through": str(before["id"]),
              "start": {"file": rel, "offset": off, "id": obj.get("id")},
              "backlog": {"file": first[0], "offset": first[1],
                          "end": {"file": rel, "offset": off}}}
    vault.append_lines(rels[-1], [sessions.dumps(marker)])
    return kept_at


def mark_imported(vault: Vault, session: str, appended: dict[str, int]) -> None:
    """After an import of a finished conversation (another assistant's export), under the
    vault lock: all of what was appended, and what still waited before it, waits to be
    archived (`backlog`), and the window starts empty after it, so the dream learns
    from every imported message and a turn in the session sends none of its history.

    `appended` maps each session file written to its size before (see mark_backlog)."""
    root = vault.root
    files = sessions.Session(root, session).files()
    rels = [f.relative_to(root).as_posix() for f in files]
    if not rels or not appended:
        return
    first = min(((r, o) for r, o in appended.items() if r in rels),
                key=lambda p: _position(rels, *p))
    found = window.last_marker(root, files)
    back = found[0].get("backlog") if found is not None else None
    if isinstance(back, dict) and isinstance(back.get("file"), str) and \
            isinstance(back.get("offset"), int) and back["file"] in rels:
        first = min(first, (back["file"], back["offset"]), key=lambda p: _position(rels, *p))
    last = rels[-1]
    size = (root / last).stat().st_size
    through = None
    for _, obj in sessions.read_backward(root / last, last, root):
        if obj.get("type") != "compact" and obj.get("id") is not None:
            through = str(obj["id"])
            break
    marker = {"type": "compact", "through": through,
              "start": {"file": last, "offset": 0, "id": None},
              "backlog": {"file": first[0], "offset": first[1],
                          "end": {"file": last, "offset": size}}}
    vault.append_lines(last, [_marker_line(marker, size, start_here=True)])


def backlog_of(root, session: str):
    """(marker, backlog) when the session has imported history waiting to be archived."""
    found = window.last_marker(root, key=session)
    if found is None:
        return None
    back = found[0].get("backlog")
    if not (isinstance(back, dict) and isinstance(back.get("file"), str)
            and isinstance(back.get("offset"), int) and isinstance(back.get("end"), dict)):
        return None
    return found, back


def backlog_bytes(root, session: str) -> int:
    """About how many bytes of imported history still wait to be archived."""
    got = backlog_of(root, session)
    if got is None:
        return 0
    _, back = got
    files = sessions.Session(root, session).files()
    rels = [f.relative_to(root).as_posix() for f in files]
    end = back["end"]
    left = 0
    for f, rel in zip(files, rels):
        lo = _position(rels, back["file"], back["offset"])
        hi = _position(rels, str(end.get("file")), int(end.get("offset", 0)))
        i = rels.index(rel)
        if i < lo[0] or i > hi[0]:
            continue
        a = lo[1] if i == lo[0] else 0
        b = hi[1] if i == hi[0] else f.stat().st_size
        left += max(0, b - a)
    return left


def _backlog_part(root, session: str, back: dict) -> tuple[list[dict], list[str], dict | None]:
    """The next chunk of the backlog: its messages, their files, and where the backlog
    goes on after it (None: it ends with this chunk)."""
    files = sessions.Session(root, session).files()
    rels = [f.relative_to(root).as_posix() for f in files]
    end = back["end"]
    hi = _position(rels, str(end.get("file")), int(end.get("offset", 0)))
    if back["file"] not in rels:
        return [], [], None
    part: list[tuple[str, int, dict]] = []
    total = 0
    nxt = None
    for rel in rels[rels.index(back["file"]):]:
        offset = back["offset"] if rel == back["file"] else 0
        for off, obj in sessions.read_forward(root, rel, offset):
            if _position(rels, rel, off) >= hi:
                return [m for _, _, m in part], [r for r, _, _ in part], None
            if obj.get("type") == "compact" or obj.get("id") is None or "role" not in obj:
                continue
            size = len(transcript([obj])) // 4 + 10
            if part and total + size > CHUNK_TOKENS:
                # Cut before the last user message that starts a turn, when one is near.
                cut = max((i for i in range(1, len(part)) if _turn_start(part[i][2])),
                          default=None)
                if cut is not None and cut >= len(part) // 2:
                    r, o, _ = part[cut]
                    part = part[:cut]
                    nxt = {**back, "file": r, "offset": o}
                else:
                    nxt = {**back, "file": rel, "offset": off}
                return [m for _, _, m in part], [r for r, _, _ in part], nxt
            total += size
            part.append((rel, off, obj))
    return [m for _, _, m in part], [r for r, _, _ in part], None


def compact_backlog(vault: Vault, provider: Provider, session: str, now: datetime, *,
                    settings=None, pause: Callable[[], None] | None = None) -> int | None:
    """Archive the next chunk (at most CHUNK_TOKENS) of the session's imported history
    waiting beyond its window; the entry's id, None when nothing waits; CompactError
    when the summary could not be made (nothing changed). `pause` as compact_session's."""
    from agent.search import index

    settings = settings or load_settings(vault.root)
    sessions.check_key(session)
    got = backlog_of(vault.root, session)
    if got is None:
        return None
    (last, rel, off), back = got
    part, files, nxt = _backlog_part(vault.root, session, back)
    if not part:
        nxt = None
    if part:
        topic, summary, importance, used, usage = summarise(
            provider, models_for(None, settings), session, part, SUMMARY_MAX_TOKENS,
            vault.root)
    if pause is not None:
        pause()
    with vault.locked():
        again = window.last_marker(vault.root, key=session)
        if again is None or again[1:] != (rel, off):
            return None                     # another process went on meanwhile
        marker: dict[str, Any] = {"type": "compact"}
        entry_id = None
        if part:
            entry_id = archive.new_id(vault.root, now)
            meta = {"session": session, **_imported(part),
                    "created": now.isoformat(timespec="seconds"),
                    "source": _source(part, files), "topic": topic, "importance": importance,
                    "tokens": context.estimate_tokens(part)}
            vault.write_text(archive.entry_path(entry_id, now),
                             archive.render(entry_id, meta, summary))
            marker["archive"] = entry_id
        marker["through"] = last.get("through")
        if part:
            marker["ids"] = [str(m["id"]) for m in part]
        if isinstance(last.get("start"), dict):
            marker["start"] = last["start"]
        if nxt is not None:
            marker["backlog"] = nxt
        vault.append_lines(marker_file(vault.root, session, now), [sessions.dumps(marker)])
        if part:
            vault.commit(Change("archive", shorten(topic), scope=session,
                                trailers={SESSION: session, "Archive": str(entry_id),
                                          MODEL: used, TOKENS: tokens(usage)}))
        else:
            vault.commit(Change("archive", "imported history all archived", scope=session,
                                trailers={SESSION: session}))
    index.refresh(vault, after_commit=True)
    return entry_id
