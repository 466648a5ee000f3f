"""Text as the search index sees it: words folded (case, accents, apostrophes), runs
of Chinese/Japanese/Korean characters cut into overlapping bigrams, stop words, the
MATCH expression of a query, and the porter stems SQLite gives words.

Normalising in Python before SQLite sees the text is what lets a two-character CJK word
inside a sentence be found: SQLite's tokenizers keep a CJK run as one token.
"""

from __future__ import annotations

import re
import unicodedata

class lazy_re:
    """A regular expression compiled on first use: compiling the search's patterns (the
    CJK character classes above all) costs ~10 ms, which `agent --help` and `agent note`
    should not pay."""

    __slots__ = ("_args", "_re")

    def __init__(self, *args):
        self._args, self._re = args, None

    def __getattr__(self, name):
        if self._re is None:
            self._re = re.compile(*self._args)
        return getattr(self._re, name)


_CJK = ("\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3031-\u3035\u3040-\u309f\u30a0-\u30ff"
        "\u3100-\u312f\u3131-\u318e\u31a0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
        "\uf900-\ufaff\U00020000-\U0002fa1f")
_CJK_RUN = lazy_re(f"[{_CJK}]+")
HAS_CJK = lazy_re(f"[{_CJK}]")
WORD = lazy_re(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_LATIN_ACCENTED = lazy_re("[\u00c0-\u024f\u1e00-\u1eff]")

STOP_WORDS = frozenset("""
a about above after again against all am an and any are aren as at be because been before
being below between both but by can cannot could couldn did didn do does doesn doing don
down during each few for from further had hadn has hasn have haven having he her here
hers herself him himself his how i if in into is isn it its itself just let me more most
mustn my myself no nor not of off on once only or other ought our ours ourselves out over
own same shan she should shouldn so some such than that the their theirs them themselves
then there these they this those through to too under until up very was wasn we were
weren what when where which while who whom why will with won would wouldn you your yours
yourself yourselves also ever get got s t d ll m re ve y
""".split())

# Words of how a question is put rather than what it asks about ("What kind of ...",
# "What did she say about ...", "How many ..."): as query words they find the chatter
# that holds them ("kind" is also the stem of "kindness"), not the answer. Left out of
# queries only, like STOP_WORDS (issue 46, with `exact_day`: tuning rec@10 / any@10
# 0.807 / 0.875 -> 0.813 / 0.880, held out through the CLI 0.772 / 0.846 -> 0.780 / 0.854).
QUESTION_WORDS = frozenset("""
kind type types sort say said describe recently mention mentioned many much likely might
way ways thing things
""".split())


def fold(word: str) -> str:
    """A word as the index stores it: case-folded, Latin accents dropped, no apostrophes."""
    w = word.casefold()
    if "'" in w or "\u2019" in w:
        w = w.replace("\u2019", "'")
        if w.endswith("'s"):
            w = w[:-2]
        w = w.replace("'", "")
    if not w.isascii() and _LATIN_ACCENTED.search(w):
        w = "".join(c for c in unicodedata.normalize("NFKD", w) if not unicodedata.combining(c))
    return w


def tokens(text: str, query: bool = False) -> list[str]:
    """The words of `text` as indexed: folded words, CJK runs as overlapping bigrams
    (and, when indexing, each run's last character)."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    out: list[str] = []
    for word in WORD.findall(text):
        if word.isascii() or not HAS_CJK.search(word):
            w = fold(word)
            if w:
                out.append(w)
            continue
        pos = 0
        for m in _CJK_RUN.finditer(word):
            if m.start() > pos:
                w = fold(word[pos:m.start()])
                if w:
                    out.append(w)
            run = m.group()
            out.extend(run[i:i + 2] for i in range(len(run) - 1))
            if not query or len(run) == 1:
                # The last character alone too: with the bigrams it starts, a
                # one-character query (searched as a prefix) finds every place it occurs.
                out.append(run[-1])
            pos = m.end()
        if pos < len(word):
            w = fold(word[pos:])
            if w:
                out.append(w)
    return out


def query_terms(query: str, limit: int = 32, stop_words: bool = True) -> list[str]:
    """The words a query searches for: stop words and QUESTION_WORDS dropped (unless
    that leaves nothing), duplicates dropped, at most `limit`."""
    words = tokens(query, query=True)
    kept = ([w for w in words if w not in STOP_WORDS and w not in QUESTION_WORDS]
            if stop_words else words)
    kept = kept or words
    seen: dict[str, None] = {}
    for w in kept:
        seen.setdefault(w, None)
    return list(seen)[:limit]


def is_cjk(term: str) -> bool:
    return bool(HAS_CJK.match(term))


def match_expression(terms: list[str]) -> str:
    """A MATCH expression OR-ing the terms, each quoted, so no query text is syntax.

    Terms hold only letters and digits, so quoting them is always safe. A lone CJK
    character is searched as a prefix of the bigrams it starts.
    """
    parts = []
    for t in terms:
        if len(t) == 1 and is_cjk(t):
            parts.append(f'"{t}"*')
        else:
            parts.append(f'"{t}"')
    return " OR ".join(parts)


_STEMS: dict[str, str] = {}


class Stemmer:
    """Porter stems of single words, from the same tokenizer the index uses."""

    def __init__(self, db):
        self.db = db
        self.cache = _STEMS
        db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.stem USING fts3tokenize(porter)")

    def __call__(self, word: str) -> str:
        s = self.cache.get(word)
        if s is None:
            row = self.db.execute("SELECT token FROM temp.stem WHERE input=?", (word,)).fetchone()
            s = self.cache[word] = row[0] if row else word
        return s
