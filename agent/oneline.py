"""Text shown on one line: whitespace folded, cut to a width with a mark where it was cut
(commit subjects, listings, search hits, provenance)."""

from __future__ import annotations

import textwrap


def shorten(text: str | None, width: int, *, placeholder: str = "...",
            at_word: bool = False) -> str:
    """`text` with every run of whitespace folded to one space, cut to `width`
    characters, `placeholder` included, when it is longer.

    `at_word`: cut at the last word that fits, as textwrap.shorten does."""
    one = " ".join(str(text or "").split())
    if len(one) <= width:
        return one
    if at_word:
        return textwrap.shorten(one, width, placeholder=placeholder)
    return one[:width - len(placeholder)].rstrip() + placeholder


def subject(text: str, width: int) -> str:
    """`text` folded to one line and cut at a word to about `width` characters, then
    "..." (a commit subject): a cut that would keep less than half is made mid-word."""
    one = " ".join(text.split())
    if len(one) <= width:
        return one
    cut = one[:width].rsplit(" ", 1)[0]
    if len(cut) < width // 2:
        cut = one[:width]
    return cut.rstrip(" ,.;:") + "..."
