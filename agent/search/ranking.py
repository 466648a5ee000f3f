"""Ranking: BM25 candidates from SQLite FTS5, re-ranked in Python by what the retrieval
evaluation (`scripts/eval_retrieval.py`) showed to help: the speaker named in the
question, the messages next to a hit, the other hits of the same day, and dates in the
question.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from agent.search.text import HAS_CJK, STOP_WORDS, Stemmer, is_cjk, lazy_re, tokens


@dataclass(frozen=True)
class Ranking:
    """The weights of the re-ranking. The defaults are what `scripts/eval_retrieval.py`
    showed to help (see its --ablation); a weight of 0 turns a feature off."""
    candidates: int = 100          # BM25 candidates re-ranked in Python (200: same figures, slower)
    speaker: float = 1.0           # boost when a query word names the doc's speaker
    neighbours: float = 0.8        # share of a hit's score passed to the messages around it
    reach: int = 2                 # how many messages away neighbours count (1/distance)
    dates: float = 1.0             # boost when a date in the question is near the doc's date
    day: float = 0.3               # boost by the other hits of the same day (one subject)
    recency: float = 0.0           # boost newer docs (did not help)
    # How many of a hit's neighbours without query words (or meaning) are shown under it,
    # the best-scored first. Each spends a place of the results: in the evaluation one
    # such neighbour in 180 was evidence, against one hit in 7 (hybrid rec@10, tuning
    # split / held out: all of them 0.755 / 0.746, one 0.764 / 0.753, none 0.766 with
    # single-hop questions losing, 0.858 -> 0.845).
    context: int = 1
    # ...and only from the same sitting: within this many hours of its hit (0: any).
    # The last line of one day's talk and the first of the next are a few lines apart
    # in a session file and about different things (issue 46: tuning 0.801 / 0.869 ->
    # 0.807 / 0.875, held out 0.770 / 0.844 -> 0.772 / 0.846, no category worse).
    sitting: float = 6.0
    # Facts in MEMORY.md/USER.md (weight 1) and archive entries (their importance): the
    # evaluation data has neither, so this is a judgement, not a measurement.
    importance: float = 0.5
    stop_words: bool = True        # leave common words out of the query
    # An archive summary is a key to the messages it covers (its `source`): each of them
    # among the candidates gets this share of the summary's score, so what a person said
    # is found by the words and meaning of its summary too (the evaluation data has no
    # archive, so this is a judgement like `importance`).
    keys: float = 0.5
    # A question naming a day ("on 3 June, 2023") mostly asks what was said that day: a
    # message of that very day gets this much more on top of `dates`, which also lifts
    # the days around it (issue 46: tuning 0.807 / 0.875 -> 0.810 / 0.877).
    exact_day: float = 1.0
    # A message that asks tells little: "What kind of bike did you get?" holds the words
    # of a question about the bike, its reply the answer. A message's score is lowered
    # by this times the share of its words in questions (after it has passed its score
    # to its neighbours, so the reply keeps what it gets). Of the hits in the first ten
    # on the tuning split, messages mostly asking were evidence 1 time in 90, those asking
    # nothing 1 in 9 (issue 46: tuning 0.813 / 0.880 -> 0.818 / 0.883, held out 0.780 / 0.854 ->
    # 0.789 / 0.865, no category worse).
    asks: float = 0.3


RANKING = Ranking()


_MONTHS = {m: i for i, m in enumerate(
    "january february march april may june july august september october november december".split(), 1)}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_MON = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_DATE_PATTERNS = [
    (lazy_re(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), "ymd"),
    (lazy_re(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MON}\.?,?\s+(\d{{4}})\b", re.I), "dmy"),
    (lazy_re(rf"\b{_MON}\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I), "mdy"),
    (lazy_re(rf"\b{_MON}\.?,?\s+(?:of\s+)?(\d{{4}})\b", re.I), "my"),
    (lazy_re(r"\b(?:in|during|of|since|from)\s+((?:19|20)\d{2})\b", re.I), "y"),
    # A month without a year ("in June") means that month of whichever year.
    (lazy_re(rf"\b(?:in|during|of|since|from|early|late|mid|last|this|next)[\s-]+{_MON}\b", re.I), "m"),
]


_ANY_YEAR = 4     # a leap year standing for "any year" in a month-only span


def question_dates(query: str) -> list[tuple[date, date]]:
    """Dates and periods named in a question, as (first day, last day).

    A month named without a year comes back in the year `_ANY_YEAR`, meaning any year.
    """
    spans: list[tuple[date, date]] = []
    taken: list[tuple[int, int]] = []
    for pattern, form in _DATE_PATTERNS:
        for m in pattern.finditer(query):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue
            try:
                if form == "ymd":
                    d = date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
                    span = (d, d)
                elif form == "dmy":
                    d = date(int(m.group(3)), _MONTHS[m.group(2).lower()[:3]], int(m.group(1)))
                    span = (d, d)
                elif form == "mdy":
                    d = date(int(m.group(3)), _MONTHS[m.group(1).lower()[:3]], int(m.group(2)))
                    span = (d, d)
                elif form == "my":
                    y, mo = int(m.group(2)), _MONTHS[m.group(1).lower()[:3]]
                    end = date(y + (mo == 12), mo % 12 + 1, 1) - timedelta(days=1)
                    span = (date(y, mo, 1), end)
                elif form == "y":
                    y = int(m.group(1))
                    span = (date(y, 1, 1), date(y, 12, 31))
                else:
                    mo = _MONTHS[m.group(1).lower()[:3]]
                    span = (date(_ANY_YEAR, mo, 1),
                            date(_ANY_YEAR + (mo == 12), mo % 12 + 1, 1) - timedelta(days=1))
            except (ValueError, KeyError):
                continue
            taken.append((m.start(), m.end()))
            spans.append(span)
    return spans


@dataclass
class Candidate:
    id: int
    file: int
    path: str
    line: int | None
    kind: str
    ts: str | None
    speaker: str | None
    session: str | None
    msg: str | None
    weight: float
    covers: str | None
    topic: str | None
    text: str
    bm25: float = 0.0
    score: float = 0.0
    passed: float = 0.0
    near_words: bool = False       # next to a candidate that holds query words (BM25 found it)

    @functools.cached_property
    def day(self) -> str | None:
        # Read a few times per candidate by each step of the re-ranking.
        return self.ts[:10] if self.ts else None


COLUMNS = ("d.id, d.file, f.path, d.line, f.kind, d.ts, d.speaker, coalesce(f.session, "
         "json_extract(d.covers, '$.session')), d.msg, d.weight, d.covers, d.topic, d.text")


def filters(since: date | None, kinds, until: date | None = None) -> tuple[list[str], list]:
    where, args = [], []
    if kinds is not None:
        where.append(f"f.kind IN ({','.join('?' * len(kinds))})")
        args.extend(sorted(kinds))
    if isinstance(since, datetime):     # a moment: compared as one, whatever the offsets
        where.append("julianday(d.ts) >= julianday(?)")
        args.append(since.isoformat())
    elif since is not None:
        where.append("d.ts >= ?")       # ISO strings compare as times
        args.append(since.isoformat())
    if isinstance(until, datetime):     # on or before that very second
        where.append("julianday(d.ts) < julianday(?)")
        args.append((until + timedelta(seconds=1)).isoformat())
    elif until is not None:
        where.append("d.ts < ?")        # until a day: up to its end
        args.append((until + timedelta(days=1)).isoformat())
    return where, args


def within(ts: str | None, since: date | None, until: date | None) -> bool:
    """Whether a document's time is inside the bounds `filters` puts on the index."""
    if isinstance(since, datetime) or isinstance(until, datetime):
        try:
            t = datetime.fromisoformat(ts) if ts else None
        except ValueError:
            t = None
        if t is None or t.tzinfo is None:
            return False
        return ((not isinstance(since, datetime) or t >= since)
                and (not isinstance(until, datetime) or t < until + timedelta(seconds=1))
                and within(ts, None if isinstance(since, datetime) else since,
                           None if isinstance(until, datetime) else until))
    return ((since is None or (ts or "") >= since.isoformat())
            and (until is None or (ts or "\uffff") < (until + timedelta(days=1)).isoformat()))


def _candidate(row: Sequence[Any], bm25: float) -> Candidate:
    """A Candidate of a row of _ranked or _newest (its first 13 columns, in field order)."""
    c = Candidate(*row[:13])
    c.bm25 = bm25
    return c


def candidates(db, expr: str, n: int, since: date | None, kinds,
               until: date | None = None, recent: str = "") -> list[Candidate]:
    """The `n` documents matching `expr` with the best BM25 score, then, for the words of
    `recent` (those too common to rank, see `within_budget`), the newest documents
    holding them, with no BM25 score of their own: at least a quarter of the places, or
    what `expr` leaves."""
    where, args = filters(since, kinds, until)
    rows = _ranked(db, expr, n, where, args) if expr else []
    found = [_candidate(r, -(r[13] or 0.0)) for r in rows]
    if recent:
        found = found[:n - n // 4]
        # Well below the weakest ranked one (the re-ranking passes scores between
        # neighbours and days, and these come in runs), yet above nothing, which it drops.
        floor = min((c.bm25 for c in found if c.bm25 > 0), default=10.0) / 10
        seen = {c.id for c in found}
        found += [_candidate(r, floor) for r in _newest(db, recent, n, where, args)
                  if r[0] not in seen][:n - len(found)]
    return found


def _ranked(db, expr: str, n: int, where: list[str], args: list) -> list[tuple]:
    """The best `n` documents matching `expr` by bm25 (the score each row ends with)."""
    return _matching(db, expr, n, where, args, score="bm25(fts)", order="s")


def _newest(db, expr: str, n: int, where: list[str], args: list) -> list[tuple]:
    """The newest `n` documents matching `expr`, read from the end of its postings (rowids
    grow as documents are indexed) with no score, so the cost follows `n`, not how many
    documents hold the words."""
    return _matching(db, expr, n, where, args, score=None, order="rowid DESC")


def _matching(db, expr: str, n: int, where: list[str], args: list, *, score: str | None,
              order: str) -> list[tuple]:
    """The first `n` documents matching `expr` in `order` (of the full-text table: "s" is
    `score`), those of `where` only, each row its COLUMNS and the score (0 without one)."""
    if not where:
        # Rank inside the full-text table first, then look up only the winners.
        inner = f"rowid AS rid, {score} AS s" if score else "rowid AS rid"
        outer = "s" if score else "d.id DESC"
        sql = (f"SELECT {COLUMNS}, {'s' if score else 0} FROM (SELECT {inner} FROM fts "
               f"WHERE fts MATCH ? ORDER BY {order} LIMIT ?) JOIN docs d ON d.id = rid "
               f"JOIN files f ON f.id = d.file ORDER BY {outer}")
        return db.execute(sql, (expr, n)).fetchall()
    sql = (f"SELECT {COLUMNS}, {f'{score} AS s' if score else 0} FROM fts "
           f"JOIN docs d ON d.id = fts.rowid "
           f"JOIN files f ON f.id = d.file WHERE fts MATCH ? AND {' AND '.join(where)} "
           f"ORDER BY {'s' if score else 'fts.' + order} LIMIT ?")
    return db.execute(sql, (expr, *args, n)).fetchall()


@dataclass
class Around:
    """The session messages near some candidates, per file in line order, and which
    candidates' surroundings they are (read while a hybrid search waits for its vectors)."""
    per_file: dict[int, list[Candidate]]
    of: set[tuple[int, int]]


def around(db, cands: list[Candidate], reach: int, known: Around | None = None) -> Around:
    """The session messages near the candidates, per file in line order.

    Looks a few lines either side (lines without text, such as tool results, are not
    documents, so the nearest messages may be more than `reach` lines away; a tool call
    carries its text on the same line, so one gap line per step is enough). What `known`
    already holds is not read again.
    """
    width = 2 * reach
    spans: list[tuple[int, int, int]] = []
    places = {(c.file, c.line) for c in cands if c.kind == "sessions" and c.line}
    if known is not None:
        places -= known.of
    for f, ln in sorted(places):
        lo, hi = ln - width, ln + width
        if spans and spans[-1][0] == f and lo <= spans[-1][2] + 1:
            spans[-1] = (f, spans[-1][1], hi)        # overlapping windows read once
        else:
            spans.append((f, lo, hi))
    per_file: dict[int, list[Candidate]] = {}
    for i in range(0, len(spans), 300):
        chunk = spans[i:i + 300]
        values = ",".join("(?,?,?)" for _ in chunk)
        sql = (f"WITH w(file, lo, hi) AS (VALUES {values}) SELECT {COLUMNS} FROM w "
               f"JOIN docs d ON d.file = w.file AND d.line BETWEEN w.lo AND w.hi "
               f"JOIN files f ON f.id = d.file")
        for r in db.execute(sql, [x for span in chunk for x in span]):
            c = Candidate(*r)
            per_file.setdefault(c.file, []).append(c)
    if known is not None:
        for f, docs in known.per_file.items():
            mine = per_file.get(f)
            if mine is None:
                per_file[f] = list(docs)
            else:
                seen = {c.id for c in mine}
                mine.extend(c for c in docs if c.id not in seen)
        places |= known.of
    for docs in per_file.values():
        docs.sort(key=lambda c: c.line or 0)
    return Around(per_file, places)


# BM25 scores every document holding any query word (and SQLite's bm25() reads every
# posting of each word to count its documents), so a word that many messages hold would
# cost in proportion to the vault. Words are counted up to this many postings: past it,
# a word is "common". A long query (a pasted paragraph) leaves its most common words out,
# keeping at least _MIN_TERMS; the common words kept are not ranked by BM25 (they weigh
# least in it, lowest idf) but find the newest messages holding them.
POSTINGS_BUDGET = 20000
_MIN_TERMS = 3


@dataclass
class Budget:
    """What a query's words cost: those ranked by BM25, and those too common to rank."""
    ranked: list[str]
    common: list[str]

    @property
    def terms(self) -> list[str]:
        return self.ranked + self.common


def postings(db, term: str) -> int:
    """How many documents hold `term` (a stem), counted no further than past the budget:
    reading its postings stops there, so a word in every message costs what a rare one
    does."""
    row = db.execute("SELECT count(*) FROM (SELECT 1 FROM fts WHERE fts MATCH ? LIMIT ?)",
                     (f'"{term}"', POSTINGS_BUDGET + 1)).fetchone()
    return row[0]


def within_budget(db, terms: list[str]) -> Budget:
    """The query's terms in two: ranked by BM25 (the rarest, as many as POSTINGS_BUDGET
    holds, and at least _MIN_TERMS) and common (a word whose postings alone pass the
    budget, kept while the query has fewer than _MIN_TERMS words). A long query leaves
    the rest out."""
    stem = Stemmer(db)
    plain = [t for t in terms if not (len(t) == 1 and is_cjk(t))]   # prefixes stay ranked
    stems = {t: stem(t) for t in plain}
    df = {k: postings(db, k) for k in set(stems.values())}
    ranked, total = [t for t in terms if t not in stems], 0
    common: list[str] = []
    for t in sorted(plain, key=lambda t: df[stems[t]]):
        kept = len(ranked) + len(common)
        if df[stems[t]] > POSTINGS_BUDGET:          # counted only so far: too common to rank
            if kept < _MIN_TERMS:
                common.append(t)
        elif total + df[stems[t]] <= POSTINGS_BUDGET or kept < _MIN_TERMS:
            ranked.append(t)
            total += df[stems[t]]
    return Budget(ranked, common)


def _near(d: date, first: date, last: date) -> bool:
    """Whether a message of day `d` may tell of a day in first..last: said a few days
    before (plans) up to a week and a half after (reports)."""
    if first.year == _ANY_YEAR:
        try:
            first, last = first.replace(year=d.year), last.replace(year=d.year + (last.year - first.year))
        except ValueError:      # 29 February
            first, last = first.replace(year=d.year, day=28), last.replace(year=d.year, day=28)
    return first - timedelta(days=3) <= d <= last + timedelta(days=10)


def same_sitting(a: str | None, b: str | None, hours: float) -> bool:
    """Whether two messages' times are within `hours` of each other (true when either
    has no readable time, or `hours` is 0: nothing to tell them apart by)."""
    if not hours or not a or not b:
        return True
    try:
        return abs((datetime.fromisoformat(a) - datetime.fromisoformat(b)).total_seconds()) <= hours * 3600
    except (ValueError, TypeError):     # a naive and an aware time, or no time at all
        return True


# A sentence: up to its end mark (Latin or full-width) or a line's end.
_SENTENCE = lazy_re(r"[^.!?\n。！？]*[.!?\n。！？]+|[^.!?\n。！？]+$")


def question_share(text: str) -> float:
    """The share of a message's words that are in its questions (a CJK character counts
    as a word: those sentences have no spaces)."""
    if "?" not in text and "？" not in text:
        return 0.0
    total = asked = 0
    for m in _SENTENCE.finditer(text):
        sentence = m.group()
        n = len(sentence.split()) + len(HAS_CJK.findall(sentence))
        total += n
        if "?" in sentence or "？" in sentence:
            asked += n
    return asked / total if total else 0.0


def _speaker_terms(speaker: str | None, cache: dict) -> set[str]:
    if not speaker:
        return set()
    if speaker not in cache:
        cache[speaker] = set(tokens(speaker)) - STOP_WORDS
    return cache[speaker]


def _lift_covered(db, cands: list[Candidate], share: float) -> None:
    """Pass `share` of each archive candidate's score to the candidate messages its
    source ranges cover (the summary as an extra key pointing back to them)."""
    import json

    keys = [c for c in cands if c.kind == "archive" and c.covers and c.score > 0]
    if not keys:
        return
    by_path: dict[str, list[Candidate]] = {}
    for c in cands:
        if c.kind == "sessions" and c.line is not None:
            by_path.setdefault(c.path, []).append(c)
    lifted: dict[int, float] = {}
    for a in keys:
        try:
            ranges = json.loads(a.covers or "{}").get("ranges") or []
        except ValueError:
            continue
        for rng in ranges:
            if not (isinstance(rng, list) and len(rng) == 3) or rng[0] not in by_path:
                continue
            file, first, last = rng
            lines = dict(db.execute(
                "SELECT d.msg, d.line FROM docs d JOIN files f ON f.id = d.file "
                "WHERE f.path = ? AND d.msg IN (?, ?)", (file, first, last)).fetchall())
            lo, hi = lines.get(first), lines.get(last)
            if lo is None and hi is None:
                continue            # ids this file does not hold: no range to trust
            for c in by_path[file]:
                if (lo is None or c.line >= lo) and (hi is None or c.line <= hi):
                    lifted[c.id] = max(lifted.get(c.id, 0.0), share * a.score)
    for c in cands:
        c.score += lifted.get(c.id, 0.0)


def rerank(db, cands: list[Candidate], query: str, terms: list[str], ranking: Ranking,
           since, until=None, meaning: dict[int, float] | None = None,
           known: Around | None = None) -> list[Candidate]:
    """The candidates in the order of their re-ranked score (BM25 scaled to the best
    one, plus `meaning[id]`: what dense retrieval adds, when it ran), then passed to
    neighbours and boosted by speaker, dates and day. `known`: the surroundings of some
    of them, already read."""
    if not cands:
        return cands
    top = max(c.bm25 for c in cands) or 1.0
    meaning = meaning or {}
    for c in cands:
        c.score = c.bm25 / top + meaning.get(c.id, 0.0)
    qset = set(terms)

    if ranking.neighbours:
        # A message's neighbours share its subject: a question's answer is often the
        # reply to the message that matches the words of the question.
        by_id = {c.id: c for c in cands}
        by_file: dict[int, list[Candidate]] = {}
        for c in cands:
            if c.kind == "sessions":
                by_file.setdefault(c.file, []).append(c)
        passed: dict[int, float] = {}
        near_words: set[int] = set()
        for f, docs in around(db, cands, ranking.reach, known).per_file.items():
            pos = {d.id: i for i, d in enumerate(docs)}
            for c in by_file.get(f, ()):
                i = pos[c.id]
                for step in range(1, ranking.reach + 1):
                    share = ranking.neighbours * c.score / step
                    for j in (i - step, i + step):
                        if 0 <= j < len(docs):
                            n = docs[j]
                            if c.bm25 > 0:
                                near_words.add(n.id)
                            if share > passed.get(n.id, 0.0):
                                passed[n.id] = share
                            if n.id not in by_id and within(n.ts, since, until):
                                by_id[n.id] = n
                                cands.append(n)
        for c in cands:
            c.passed = passed.get(c.id, 0.0)
            c.near_words = c.id in near_words
            c.score += c.passed

    if ranking.asks:
        for c in cands:
            if c.kind == "sessions":
                c.score *= 1 - ranking.asks * question_share(c.text)

    if ranking.keys:
        _lift_covered(db, cands, ranking.keys)

    if ranking.speaker:
        cache: dict = {}
        for c in cands:
            if _speaker_terms(c.speaker, cache) & qset:
                c.score *= 1 + ranking.speaker

    if ranking.dates:
        spans = question_dates(query)
        if spans:
            named = {a for a, b in spans if a == b}
            for c in cands:
                if not c.day:
                    continue
                try:
                    d = date.fromisoformat(c.day)
                except ValueError:
                    continue
                if any(_near(d, a, b) for a, b in spans):
                    c.score *= 1 + ranking.dates
                if d in named:
                    c.score *= 1 + ranking.exact_day

    if ranking.day:
        per_day: dict[str, float] = {}
        for c in cands:
            if c.day:
                per_day[c.day] = per_day.get(c.day, 0.0) + c.score
        best = max(per_day.values(), default=0.0) or 1.0
        for c in cands:
            if c.day:
                c.score *= 1 + ranking.day * (per_day[c.day] / best)

    if ranking.recency:
        days = [c.day for c in cands if c.day]
        if days:
            newest = date.fromisoformat(max(days))
            for c in cands:
                if c.day:
                    with contextlib.suppress(ValueError):
                        age = (newest - date.fromisoformat(c.day)).days
                        c.score *= 1 + ranking.recency * math.exp(-age / 180)

    if ranking.importance:
        for c in cands:
            if c.kind in ("memory", "archive"):
                c.score *= 1 + ranking.importance * (c.weight or 0.0)

    cands = [c for c in cands if c.score > 0]
    cands.sort(key=lambda c: (-c.score, -c.id))
    return cands
