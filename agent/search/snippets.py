"""Snippets: a hit's text cut to a window around its matches, matches marked [like this]."""

from __future__ import annotations

import unicodedata

from agent.search.text import HAS_CJK, WORD, fold


SCAN_CHARS = 20_000      # of a long text, where matches are looked for (cost: not its size)


def snippet(text: str, stems: set[str], cjk: list[str], stem, width: int = 240) -> str:
    """The text (cut to a window around the matches when long) with matches in [ ]."""
    whole = len(text)
    if whole > SCAN_CHARS:
        text = text[:SCAN_CHARS]
    marks: list[tuple[int, int]] = []
    for m in WORD.finditer(text):
        word = m.group()
        if HAS_CJK.search(word):
            continue
        if stem(fold(unicodedata.normalize("NFKC", word))) in stems:
            marks.append((m.start(), m.end()))
    if cjk:
        covered = [False] * len(text)
        for t in cjk:
            start = text.find(t)
            while start >= 0:
                for k in range(start, start + len(t)):
                    covered[k] = True
                start = text.find(t, start + 1)
        i = 0
        while i < len(text):
            if covered[i]:
                j = i
                while j < len(text) and covered[j]:
                    j += 1
                marks.append((i, j))
                i = j
            else:
                i += 1
        marks.sort()
    flat = " ".join(text.split()) if len(text) <= width else None
    lo, hi = 0, len(text)
    if flat is None:
        centre = marks[0][0] if marks else 0
        if marks:
            # The window with the most matches wins (one pass: marks are in order).
            best, count, j, span = 0, 0, 0, width * 2 // 3
            starts = [a for a, _ in marks]
            for i, a in enumerate(starts):
                j = max(j, i)
                while j < len(starts) and starts[j] < a + span:
                    j += 1
                if j - i > count:
                    best, count = i, j - i
            centre = marks[best][0]
        lo = max(0, centre - width // 3)
        hi = min(len(text), lo + width)
        lo = max(0, min(lo, hi - width))
        if lo > 0:
            sp = text.find(" ", lo, lo + 20)
            lo = sp + 1 if sp >= 0 else lo
        if hi < len(text):
            sp = text.rfind(" ", hi - 20, hi)
            hi = sp if sp > lo else hi
    out, pos = [], lo
    for a, b in marks:
        if a < lo or b > hi or a < pos:
            continue
        out.append(text[pos:a])
        out.append(f"[{text[a:b]}]")
        pos = b
    out.append(text[pos:hi])
    s = " ".join("".join(out).split())
    return ("…" if lo > 0 else "") + s + ("…" if hi < whole else "")
