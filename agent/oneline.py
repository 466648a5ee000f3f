"""Text shown on one line: whitespace folded, cut to a width with a mark where it was cut
(commit subjects, listings, search hits, provenance), without the control characters
a terminal would obey (`printable`), and a count with its noun (`plural`)."""

from __future__ import annotations

import re
import textwrap

# A terminal escape (CSI `ESC[...m`, OSC `ESC]0;title BEL` that retitles the window or
# writes the clipboard, any other `ESC x`), then any control character left: C0 but tab
# and newline, DEL, C1, and the bidirectional overrides that reorder what is shown.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]?|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?"
                      r"|\x9b[0-?]*[ -/]*[@-~]?|\x9d[^\x07\x1b\x9c]*[\x07\x9c]?"
                      r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` without terminal escapes or control characters (tabs and newlines kept):
    what a title or a line from a file that came from elsewhere may be shown as."""
    return _ESCAPES.sub("", text) if text and not text.isprintable() else text


def shorten(text: str | None, width: int, *, placeholder: str = "...",
            at_word: bool = False) -> str:
    """`text` with every run of whitespace folded to one space, cut to `width`
    characters, `placeholder` included, when it is longer.

    `at_word`: cut at the last word that fits, as textwrap.shorten does."""
    one = " ".join(printable(str(text or "")).split())
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


def plural(n: int, word: str, words: str | None = None) -> str:
    """`1 fact`, `3 facts`; `words` for a plural that is not `word` + s (entry, entries)."""
    return f"{n} {word if n == 1 else words or word + 's'}"
