"""Fusing the word ranking with the dense one (agent/search/fusion.py), as tables: the
fused order, what meaning adds to a candidate's score, which texts may stand on their
meaning alone."""

from __future__ import annotations

import pytest

from agent.search.fusion import FUSION, Fusion, fuse, meaning, substantial

K = FUSION.k

FUSE = [
    # (name, word ids, dense ids, fusion, fused ids)
    ("both rankings agree", [1, 2, 3], [1, 2, 3], FUSION, [1, 2, 3]),
    ("a document in both beats one first in only one", [1, 2, 3], [3, 4], FUSION, [3, 1, 4, 2]),
    ("words only", [5, 6], [], FUSION, [5, 6]),
    ("dense only", [], [7, 8], FUSION, [7, 8]),
    ("nothing", [], [], FUSION, []),
    ("an equal score: the newer document (the higher id) first", [1], [2], FUSION, [2, 1]),
    ("dense weighed out", [1, 2], [2, 1], Fusion(dense=0.0), [1, 2]),
    ("words weighed out", [1, 2], [2, 1], Fusion(words=0.0), [2, 1]),
]


@pytest.mark.parametrize("name, words, dense, fusion, order", FUSE, ids=[f[0] for f in FUSE])
def test_fuse_orders_by_summed_reciprocal_rank(name, words, dense, fusion, order):
    assert [i for i, _ in fuse(words, dense, fusion)] == order


def test_fuse_scores_are_weight_over_k_plus_rank_summed():
    got = dict(fuse([10, 20], [20], Fusion(words=1.0, dense=0.5)))
    assert got == pytest.approx({10: 1 / (K + 1), 20: 1 / (K + 2) + 0.5 / (K + 1)})


MEANING = [
    # (name, (id, cosine) nearest first, the vault's level, fusion, what each id gets)
    ("the closest gets the full weight, the rest in proportion above the level",
     [(1, 0.90), (2, 0.85), (3, 0.80)], 0.80, FUSION, {1: 1.0, 2: 0.5}),
    ("at or under the level: nothing", [(1, 0.90), (2, 0.80), (3, 0.75)], 0.80, FUSION, {1: 1.0}),
    ("the weight scales it", [(1, 0.90), (2, 0.85)], 0.80, Fusion(dense=2.0), {1: 2.0, 2: 1.0}),
    ("nothing closer than the level: nothing at all", [(1, 0.80), (2, 0.70)], 0.80, FUSION, {}),
    ("no neighbours", [], 0.80, FUSION, {}),
    ("dense switched off", [(1, 0.90)], 0.80, Fusion(dense=0.0), {}),
]


@pytest.mark.parametrize("name, near, level, fusion, added", MEANING, ids=[m[0] for m in MEANING])
def test_meaning_adds_similarity_above_the_vaults_level(name, near, level, fusion, added):
    assert meaning(near, level, fusion) == pytest.approx(added)


SUBSTANTIAL = [
    # (text, enough words to be shown for its meaning alone)
    ("Booked.", False),
    ("ok", False),
    ("Sounds good", False),
    ("I drank far too much coffee", True),
    ("café au lait", True),                  # accented letters are word letters
    ("咖啡", False),                          # a CJK character counts half a word
    ("我喝了咖啡", False),                    # 2.5 words
    ("我今天早上喝了咖啡", True),
    ("!!! ??? ...", False),
    ("", False),
]


@pytest.mark.parametrize("text, shown", SUBSTANTIAL)
def test_a_text_stands_on_its_meaning_only_with_some_substance(text, shown):
    assert substantial(text, FUSION.min_words) is shown


@pytest.mark.parametrize("text, at_least, shown", [
    ("one two", 2, True), ("one two", 3, False), ("咖啡咖啡", 2, True), ("", 0, True),
])
def test_the_word_count_needed_is_the_settings(text, at_least, shown):
    assert substantial(text, at_least) is shown
