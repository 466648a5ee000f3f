"""Explicit-only learning (`[memory] learn = "explicit"`): the dream keeps only what the
person asked it to keep.

What counts as asking is read from the session lines an archive entry covers, never
from the model: a message of the person's (role "user": never a tool result, a web page
or a file, where a stranger's words arrive) that asks to remember ("remember that...",
"don't forget...", "note that...", "keep in mind..."), together with the person's
message before it when the ask itself is short ("I moved to Lisbon." / "Remember
that."), and the text of a `remember` call the model made in that same turn. An entry
without such a message is passed over: it is not sent to the model at all.

After the model replies, every finding and edit is checked against those asks: an add
or update whose line the asks do not state (at least half of its distinctive words
found in them) is dropped, and so is a removal, unless it settles a sync-conflict
block. So an archive entry crafted to steer the model still cannot make the dream keep
something the person never asked for. Pure functions over text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.llm.records import ToolCall
from agent.stores import sessions
from agent.dream.duplicates import words

# A request to keep something: the verb as an imperative (at the start of a sentence,
# after "please", "can you" and the like), never a question ("do you remember...") or a
# memory of one's own ("I remember...").
_LEAD = r"(?:^|[.!?;:,\n]\s*|\b(?:please|pls|and|also|so|can you|could you|would you|will you)\s+)"
_VERBS = (r"(?:remember|memori[sz]e|don'?t forget|do not forget|never forget|keep in mind|"
          r"bear in mind|make a note|take a note|note (?:that|this|down|it)|"
          r"write (?:that|this|it) down|save (?:that|this|it)\b|"
          r"keep (?:that|this|it) in (?:mind|memory)|add (?:that|this|it) to (?:your )?memory)")
ASK = re.compile(_LEAD + _VERBS + r"\b", re.IGNORECASE)
_SHORT = 8          # words: an ask this short points at the message before it
REMEMBER_TOOL = "remember"


def asks_to_remember(text: str) -> bool:
    """Whether a message of the person's asks to keep something."""
    return bool(ASK.search(text or ""))


def _said(content: object) -> str:
    return sessions.message_text(content, sep=" ")


def requests(lines: Iterable[dict]) -> list[str]:
    """The person's asks to remember in an entry's session lines (in order): each asking
    message (with the one before it when the ask is short) and the `remember` calls of
    its turn."""
    out: list[str] = []
    before = ""
    asked_turns: set[object] = set()
    rows = [o for o in lines if isinstance(o, dict) and o.get("role") in ("user", "assistant")]
    for obj in rows:
        if obj.get("role") != "user":
            continue
        text = _said(obj.get("content", ""))
        if not text.strip():
            continue            # a message of tool results only: not the person's words
        if asks_to_remember(text):
            if len(text.split()) <= _SHORT and before:
                out.append(before)
            out.append(text)
            asked_turns.add(obj.get("turn"))
        before = text
    for obj in rows:
        if obj.get("role") != "assistant" or obj.get("turn") not in asked_turns:
            continue
        content = obj.get("content")
        for block in sessions.blocks(content) if isinstance(content, list) else []:
            if isinstance(block, ToolCall) and block.name == REMEMBER_TOOL:
                said = (block.input or {}).get("text")
                if isinstance(said, str) and said.strip():
                    out.append(said)
    return out


def stated(line: str, asked: set[str]) -> bool:
    """Whether the person's asks (`asked`: their words) state `line`: at least half of
    its words are in them."""
    mine = words(line)
    return bool(mine) and 2 * len(mine & asked) >= len(mine)


def asked_words(asks: list[str]) -> set[str]:
    return set().union(*(words(a) for a in asks)) if asks else set()


def keep_findings(findings: list[dict], asks: list[str]) -> tuple[list[dict], int]:
    """The findings the asks state (a "stale" finding removes, never keeps: dropped),
    and how many were dropped."""
    theirs = asked_words(asks)
    kept = [f for f in findings if f.get("kind") != "stale"
            and stated(str(f.get("statement", "")), theirs)]
    return kept, len(findings) - len(kept)


def unasked(op: dict, asks: set[str], in_conflict: bool) -> str | None:
    """Why an editor operation is not what the person asked to keep, or None."""
    if in_conflict:
        return None             # settling a sync-conflict block keeps a version they wrote
    kind = str(op.get("op", ""))
    if kind == "delete":
        return "a removal nobody asked for ([memory] learn = explicit)"
    if not stated(str(op.get("new", "")), asks):
        return "not something the person asked to remember ([memory] learn = explicit)"
    return None
