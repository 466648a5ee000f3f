"""The short text chat commits are made of: a message shortened to a subject line
(the Tokens trailer is agent.vault.change.tokens). Shared by the turn (agent.chat.turn) and compaction
(agent.chat.compact), which must not import each other."""

from __future__ import annotations

from agent.oneline import subject

SUBJECT_CHARS = 60


def shorten(text: str, limit: int = SUBJECT_CHARS) -> str:
    """The first line of `text`, spaces folded, cut at a word to about `limit` characters."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    return subject(first, limit) or "(empty message)"
