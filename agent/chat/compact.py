"""Compaction: the oldest part of a conversation window becomes an archive entry.

When a session's window passes `window_tokens` (agent.toml [chat]), its oldest
messages, cut just before a user message so no exchange is split, are summarised by
the model (structured output: topic, summary, importance) into
`archive/YYYY/MM/<id>.md`, and a marker line
`{"type": "compact", "archive": <id>, "through": "<last message id>"}` is appended to
the session; both land in one commit `archive(<session>): <topic>`. The messages stay
in the session file; the window simply starts after them.

Archive frontmatter written here: `id`, `session`, `created` (ISO 8601), `source`
(`{file, from, through}`: the session file and the first and last message ids; a list
of those when the part spans two month files), `topic`, `importance` — a number from
0 to 1 (0.1 small talk, 0.5 useful context, 0.9 lasting facts or decisions about the
person) — and `tokens` (the estimated size of the messages it covers).

If summarising fails the window is left as it was: compaction is tried again after
the next turn (or by `agent archive`).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

from agent.chat import prompt as context
from agent.chat.subjects import shorten, tokens_trailer
from agent.config import load_settings
from agent.errors import UserError
from agent.llm import Provider, ProviderError, models_for
from agent.stores import archive, sessions
from agent.vault.change import Change

log = logging.getLogger("agent.chat.compact")

KEEP_SHARE = 0.5               # after compaction the window holds at most half its budget
TOOL_RESULT_CHARS = 600        # of each tool result shown to the summariser
SUMMARY_MAX_TOKENS = 2000

SCHEMA = {
    "type": "object",
    "properties": {
        "topic": {"type": "string",
                  "description": "What the conversation was about, in at most 8 words."},
        "summary": {"type": "string",
                    "description": "What a reader needs later: facts, decisions, plans, "
                                   "preferences, open questions, with absolute dates."},
        "importance": {"type": "number",
                       "description": "0 to 1: 0.1 small talk, 0.5 useful context, "
                                      "0.9 lasting facts or decisions about the person."},
    },
    "required": ["topic", "summary", "importance"],
    "additionalProperties": False,
}

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
    return isinstance(c, list) and not any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in c)


def plan_cut(window: list[dict], budget: int, force: bool = False) -> int:
    """How many of the window's oldest messages to compact (0: none).

    The rest starts at a user message and, when possible, fits in half the budget; with
    force, the whole window.
    """
    if force:
        return len(window)
    sizes = [context.estimate_tokens([m]) for m in window]
    if sum(sizes) <= budget:
        return 0
    starts = [i for i in range(1, len(window)) if _turn_start(window[i])]
    if not starts:
        return 0
    for i in starts:
        if sum(sizes[i:]) <= budget * KEEP_SHARE:
            return i
    return starts[-1]


def _tool_text(b: dict) -> str:
    if b.get("type") == "tool_use":
        args = json.dumps(b.get("input", {}), ensure_ascii=False)
        return f"[called {b.get('name')}({args[:TOOL_RESULT_CHARS]})]"
    res = b.get("content")
    res = res if isinstance(res, str) else json.dumps(res, ensure_ascii=False)
    return f"[tool result: {res[:TOOL_RESULT_CHARS]}]"


def transcript(messages: list[dict]) -> str:
    """The messages as plain text for the summariser."""
    out = []
    for m in messages:
        when = str(m.get("ts", ""))[:16].replace("T", " ")
        who = m.get("speaker") or m.get("role", "?")
        text = sessions.message_text(m.get("content"), tool=_tool_text)
        if m.get("interrupted"):
            text += " [interrupted]"
        if text.strip():
            out.append(f"[{when}] {who}: {text}")
    return "\n\n".join(out)


def summarise(provider: Provider, models: list[str], session: str, part: list[dict],
              max_tokens: int):
    """(topic, summary, importance, model used, usage) for `part`; CompactError on failure."""
    body = f"Session: {session}\n\n<conversation>\n{transcript(part)}\n</conversation>"
    try:
        msg = provider.create(
            models, max_tokens=max_tokens, system=SYSTEM,
            messages=[{"role": "user", "content": body}],
            output_config={"format": {"type": "json_schema", "schema": SCHEMA}})
    except ProviderError as e:
        raise CompactError(f"Could not summarise {session} for the archive: {e}") from None
    text = msg.text
    try:
        data = json.loads(text)
    except ValueError:
        raise CompactError(f"Could not summarise {session}: the model's answer was not "
                           f"JSON ({text[:80]!r})") from None
    topic = data.get("topic") if isinstance(data, dict) else None
    summary = data.get("summary") if isinstance(data, dict) else None
    importance = data.get("importance") if isinstance(data, dict) else None
    if not isinstance(topic, str) or not topic.strip() or not isinstance(summary, str) \
            or not summary.strip():
        raise CompactError(f"Could not summarise {session}: the answer lacks a topic or "
                           f"a summary ({text[:80]!r})")
    if not isinstance(importance, (int, float)) or isinstance(importance, bool):
        importance = 0.5
    importance = float(importance)
    if importance > 1:      # a model answering on a 1-5 or 1-10 scale
        importance = importance / (5 if importance <= 5 else 10)
    importance = round(min(max(importance, 0.0), 1.0), 2)
    return " ".join(topic.split()), summary.strip(), importance, msg.model, msg.usage


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


def compact_session(vault, provider: Provider, session: str, now: datetime, *, force: bool = False,
                    settings=None) -> int | None:
    """Compact the window's oldest part (with force, the whole window) into an archive
    entry; returns its id, None when there is nothing to compact; CompactError when the
    summary could not be made (nothing changed)."""
    from agent.search import index

    settings = settings or load_settings(vault.root)
    sessions.check_key(session)
    w = sessions.read_window(vault.root, session)
    n = plan_cut(w.messages, settings.window_tokens, force)
    part, files = w.messages[:n], w.files[:n]
    while part and part[-1].get("id") is None:
        part, files = part[:-1], files[:-1]
    if not part:
        return None
    topic, summary, importance, used, usage = summarise(
        provider, models_for(None, settings), session, part, SUMMARY_MAX_TOKENS)

    with vault.locked():
        # Another process may have compacted this window meanwhile.
        now_window = sessions.read_window(vault.root, session).messages
        if not now_window or now_window[0].get("id") != part[0].get("id"):
            return None
        entry_id = archive.new_id(vault.root, now)
        meta = {"session": session, "created": now.isoformat(timespec="seconds"),
                "source": _source(part, files), "topic": topic, "importance": importance,
                "tokens": context.estimate_tokens(part)}
        vault.write_text(archive.entry_path(entry_id, now), archive.render(entry_id, meta, summary))
        marker = {"type": "compact", "archive": entry_id, "through": str(part[-1]["id"])}
        vault.append_line(sessions.month_file(session, now), sessions.dumps(marker))
        vault.commit(Change("archive", shorten(topic), scope=session,
                            trailers={"Session": session, "Archive": str(entry_id),
                                      "Model": used, "Tokens": tokens_trailer(usage)}))
    index.refresh(vault, after_commit=True)
    return entry_id
