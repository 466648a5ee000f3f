"""Memory tools: remember, memory_search, memory_get."""

from __future__ import annotations

from typing import Literal

from agent.stores import holds
from agent.stores import memory
from agent.chat.tools.files import _read, confine, hold
from agent.chat.tools.registry import ToolError, current_context, tool

TITLES = memory.TITLES


@tool(writes=True)
def remember(text: str, target: Literal["daily", "memory", "user"] = "daily",
             section: str | None = None) -> str:
    """Keep something in memory, saved with this turn.

    Args:
        text: What to keep, as one self-contained sentence with absolute dates.
        target: "daily" for today's daily note (passing things, the default); "memory"
            for MEMORY.md (lasting facts); "user" for USER.md (facts about the person).
        section: For memory and user: the heading to add the fact under (created when
            missing), e.g. "Preferences". Ignored for daily.
    """
    one = " ".join(memory.printable(text).split())
    if not one:
        raise ToolError("Nothing to remember: text is empty.")
    ctx = current_context()
    vault = ctx.vault
    if target == "daily":
        rel = memory.daily_path(ctx.now.date())
        line = memory.note_line(one, ctx.now)
        vault.append_lines(rel, [line], header=memory.daily_header(ctx.now.date()))
        return f"Noted in {rel}: {line}"
    rel = memory.MEMORY if target == "memory" else memory.USER
    if getattr(ctx.settings, "memory_learn", "auto") == "explicit" and not _asked(ctx.messages):
        raise ToolError(f"Not kept in {rel}: the person keeps memory explicit ([memory] learn "
                        f"= \"explicit\"), so a lasting fact is kept only when they ask to "
                        f"remember it. Use target \"daily\" for today's note, or ask them.")
    before = vault.current(rel)
    if holds.holds(ctx.settings):
        if before is not None and memory.find_fact(before, one) is not None:
            return f"{rel} already has: - {one}"
        return hold(rel, [{"op": "add", "file": rel, "section": (section or "").strip(),
                           "old": "", "new": f"- {one}", "reason": ""}])
    vault.update(rel, lambda old: memory.add_fact(old, one, section, TITLES[rel]))
    if before is not None and memory.find_fact(before, one) is not None:
        return f"{rel} already has: - {one}"
    where = f" under {section.strip()}" if section else ""
    return f"Added to {rel}{where}: - {one}"


def _asked(messages: list | None) -> bool:
    """Whether the person's newest words in this turn (not the <context> block the
    system adds, not a tool's result) ask to remember something."""
    from agent.dream.learning import asks_to_remember

    from agent.llm.records import Text

    for message in reversed(messages or []):
        if message.role != "user":
            continue
        said = [b.text for b in message.blocks
                if isinstance(b, Text) and not b.text.startswith("<context>")]
        if said:
            return any(asks_to_remember(t) for t in said)
    return False


def _real_vault():
    return current_context().vault.vault


def format_hit(hit) -> str:
    where = f"{hit.path}:{hit.line}" if getattr(hit, "line", None) else hit.path
    when = f" [{hit.ts[:16].replace('T', ' ')}]" if getattr(hit, "ts", None) else ""
    who = f" {hit.speaker}:" if getattr(hit, "speaker", None) else ""
    body = " ".join((getattr(hit, "text", None) or getattr(hit, "snippet", "") or "").split())
    if len(body) > 400:
        body = body[:400] + "..."
    return f"- {where}{when}{who} {body}"


@tool
def memory_search(query: str, limit: int = 10) -> str:
    """Search everything remembered: past conversations, MEMORY.md, USER.md, daily notes, archive.

    Args:
        query: Key words to look for (names, places, distinctive words).
        limit: How many hits to return at most (1 to 50).
    """
    from agent.search import index

    if not query.strip():
        raise ToolError("query is empty; give key words to search for.")
    limit = max(1, min(limit, 50))
    hits = index.search(_real_vault(), query, limit=limit)
    if not hits:
        return f"No matches for {query!r}."
    used = current_context().used
    if used is not None:             # the turn's record of what memory it was shown
        for h in hits:
            used.found(h.path, h.line, list(h.message_ids), _real_vault().root)
    return "\n".join(format_hit(h) for h in hits)


@tool
def memory_get(path: str, start_line: int = 1, lines: int = 50) -> str:
    """Read some lines of a vault file, numbered (e.g. around a memory_search hit).

    Args:
        path: The file's path relative to the vault.
        start_line: The first line to show (1 is the first line of the file).
        lines: How many lines to show (at most 500).
    """
    rel = confine(path)
    text = _read(rel, errors="replace")
    all_lines = text.splitlines()
    start = max(1, start_line)
    count = max(1, min(lines, 500))
    picked = all_lines[start - 1:start - 1 + count]
    if not picked:
        return f"{rel} has {len(all_lines)} lines; nothing at line {start}."
    width = len(str(start + len(picked) - 1))
    body = "\n".join(f"{n:>{width}}  {line}" for n, line in enumerate(picked, start))
    end = start + len(picked) - 1
    return f"{rel} lines {start}-{end} of {len(all_lines)}:\n{body}"
