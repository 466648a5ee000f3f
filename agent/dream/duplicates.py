"""No fact learned twice: a dream's edit that restates what memory holds already, or
what a turn recalled from memory (a memory_search or memory_get result in the
transcript), is dropped before review and counted (the `Dropped-duplicates:` trailer of
the dream's commit).

Two statements are the same fact when

- their text is the same once case, punctuation, spacing and the bullet are set aside
  ("- Lives in Lisbon." and "lives in lisbon"), or
- every word that makes the new one (numbers, words of three letters or more that are
  not filler; at least two of them) is a word of the one held, and neither says "not"
  where the other does not: "- The user lives in Lisbon" restates "- Lives in Lisbon",
  "- Flying to Kyoto on 2026-12-10" does not restate "- Flying to Kyoto on 2026-12-03".

The test is on words, not on a model's embeddings, so it decides the same on every
machine. Pure functions over text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.stores.memory import FACT, normalise

_WORD = re.compile(r"\w+")
_FILLER = frozenset(
    "about after also been before from have into just more most much only over same some "
    "such than that their them then there these they this very what when where which while "
    "will with would your the and for are was has had you his her its our who user person "
    "she him".split())
_NEGATIONS = frozenset("not never no none nothing isn doesn don didn wasn aren won".split())
FLOOR = 2           # words a statement needs before it can restate by its words alone


def key(text: str) -> str:
    """A statement with case, punctuation, spacing and its bullet set aside."""
    return " ".join(_WORD.findall(normalise(text)))


def words(text: str) -> set[str]:
    """The words that make a statement itself."""
    return {w for w in _WORD.findall(normalise(text))
            if (w.isdigit() or len(w) >= 3) and w not in _FILLER}


def _negated(text: str) -> bool:
    return bool(set(_WORD.findall(text.casefold())) & _NEGATIONS)


class Held:
    """What is held already (memory's fact lines, recalled lines), indexed by word."""

    def __init__(self, lines: Iterable[str]):
        self.keys: dict[str, str] = {}
        self.items: list[tuple[str, set[str], bool]] = []
        self.by_word: dict[str, list[int]] = {}
        for line in lines:
            if not line.strip():
                continue
            self.keys.setdefault(key(line), line)
            mine = words(line)
            n = len(self.items)
            self.items.append((line, mine, _negated(line)))
            for w in mine:
                self.by_word.setdefault(w, []).append(n)

    def restated(self, statement: str) -> str | None:
        """The held line `statement` restates, or None."""
        same = self.keys.get(key(statement))
        if same is not None:
            return same
        mine = words(statement)
        if len(mine) < FLOOR:
            return None
        rarest = min((self.by_word.get(w, []) for w in mine), key=len)
        negated = _negated(statement)
        for n in rarest:
            line, theirs, neg = self.items[n]
            if mine <= theirs and neg == negated:
                return line
        return None


def memory_lines(texts: dict[str, str]) -> list[str]:
    """The fact lines of the memory files."""
    return [line for text in texts.values() for line in text.splitlines() if FACT.match(line)]
