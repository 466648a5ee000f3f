"""The mark of a model that runs away: the end of its text one unit over and over,
exactly (no prose, list or table does that; a small local model at greedy sampling
does, for thousands of tokens: issue 42).

    repeating("... 1.0 lasting facts, 1.0 lasting facts, 1.0 lasting facts, ")  # -> 18
"""

from __future__ import annotations

# The end counts as repeating when its last MIN_SPAN characters (and at least MIN_COPIES
# copies of the unit) are one unit of at most MAX_UNIT characters.
MIN_SPAN = 600
MIN_COPIES = 6
MAX_UNIT = 300


def repeating(text: str, min_span: int = MIN_SPAN, min_copies: int = MIN_COPIES,
              max_unit: int = MAX_UNIT) -> int | None:
    """The length of the unit the end of `text` repeats over and over, or None."""
    n = len(text)
    for unit in range(1, max_unit + 1):
        span = max(min_span, unit * min_copies)
        if span > n:
            return None
        tail = text[n - span:]
        if tail[unit:] == tail[:-unit]:
            return unit
    return None
