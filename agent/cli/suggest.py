"""The names closest to a mistyped one, for "did you mean ...?" in an error."""

from __future__ import annotations

import difflib


def closest(name: str, known: list[str], n: int = 3) -> list[str]:
    """Up to `n` of `known` (vault paths) closest to `name`, comparing whole paths and
    file names alike, so that MEMROY.md finds MEMORY.md and 2026-11-02.md finds
    memory/2026-11-02.md."""
    by_name: dict[str, str] = {}
    for rel in known:
        by_name.setdefault(rel, rel)
        by_name.setdefault(rel.rsplit("/", 1)[-1], rel)
    out: list[str] = []
    for hit in difflib.get_close_matches(name, list(by_name), n=n * 2, cutoff=0.7):
        if by_name[hit] not in out:
            out.append(by_name[hit])
    return out[:n]
