"""The short texts chat commits are made of: a message shortened to a subject line, and
the Tokens trailer. Shared by the turn (agent.chat.turn) and compaction
(agent.chat.compact), which must not import each other."""

from __future__ import annotations

SUBJECT_CHARS = 60


def shorten(text: str, limit: int = SUBJECT_CHARS) -> str:
    """The first line of `text`, spaces folded, cut at a word to about `limit` characters."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    one = " ".join(first.split())
    if len(one) <= limit:
        return one or "(empty message)"
    cut = one[:limit].rsplit(" ", 1)[0]
    if len(cut) < limit // 2:
        cut = one[:limit]
    return cut.rstrip(" ,.;:") + "..."


def tokens_trailer(u: dict) -> str:
    """`12 in, 5 out, 0 cache read, 0 cache write` from the four token counts."""
    return (f"{u['input_tokens']} in, {u['output_tokens']} out, "
            f"{u['cache_read_input_tokens']} cache read, "
            f"{u['cache_creation_input_tokens']} cache write")
