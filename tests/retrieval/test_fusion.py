"""Fusion (RRF, convex) and dynamic top-k: pure functions."""

import pytest

from retrieval.dynamic_topk import cut_at_cliff
from retrieval.fusion import RankedHit, convex_fusion, reciprocal_rank_fusion


def hits(*ids, doc=1):
    return [RankedHit(i, doc, 1.0 / (n + 1)) for n, i in enumerate(ids)]


def test_rrf_sums_reciprocal_ranks_and_records_sources():
    # when
    fused = reciprocal_rank_fusion({"dense:original": hits(1, 2, 3), "sparse:original": hits(3, 1)})
    # then
    assert [h.id for h in fused] == [1, 3, 2]
    assert fused[0].score == 1 / 61 + 1 / 62
    assert fused[0].sources == ("dense:original", "sparse:original")
    assert fused[2].sources == ("dense:original",)


def test_rrf_ties_keep_first_seen_order():
    fused = reciprocal_rank_fusion({"a": hits(10, 20), "b": hits(20, 10)})
    assert fused[0].score == fused[1].score
    assert [h.id for h in fused] == [10, 20]


def test_rrf_counts_duplicates_in_one_list_once_at_best_rank():
    fused = reciprocal_rank_fusion({"a": hits(1, 1, 2), "b": hits(2)})
    scores = {h.id: h.score for h in fused}
    assert scores[1] == 1 / 61
    assert scores[2] == 1 / 62 + 1 / 61


def test_rrf_with_one_valid_list_keeps_raw_scores():
    dense = [RankedHit(5, 1, 0.91), RankedHit(6, 1, 0.42)]
    fused = reciprocal_rank_fusion({"dense:original": dense, "sparse:original": []})
    assert [(h.id, h.score, h.sources) for h in fused] == [(5, 0.91, ("dense:original",)), (6, 0.42, ("dense:original",))]


def test_rrf_is_stable_and_limited():
    lists = {"a": hits(*range(50)), "b": hits(*reversed(range(50)))}
    first = reciprocal_rank_fusion(lists, limit=30)
    assert len(first) == 30
    assert first == reciprocal_rank_fusion(lists, limit=30)


def test_rrf_no_lists():
    assert reciprocal_rank_fusion({}) == []
    assert reciprocal_rank_fusion({"a": [], "b": []}) == []


def test_dynamic_top_k_stops_at_a_relative_cliff():
    assert cut_at_cliff([0.9, 0.88, 0.85, 0.4, 0.38], max_k=5) == 3


def test_dynamic_top_k_stops_at_an_absolute_cliff():
    assert cut_at_cliff([3.0, 2.9, 2.3, 2.2], max_k=4) == 2  # drop 0.6 > 0.5


def test_dynamic_top_k_never_exceeds_max_k():
    assert cut_at_cliff([0.9, 0.89, 0.88, 0.87], max_k=2) == 2


# --- convex fusion -------------------------------------------------------------------------------


def scored(*pairs):
    return [RankedHit(hit_id, hit_id * 10, score) for hit_id, score in pairs]


def test_convex_keeps_a_hit_far_ahead_in_one_channel_first():
    # given: BM25 puts 1 far ahead; dense ranks 2 a hair above 1
    lists = {
        "dense:original": scored((2, 0.90), (1, 0.89), (3, 0.70)),
        "sparse:original": scored((1, 30.0), (2, 4.0), (3, 3.0)),
    }

    # when
    convex = convex_fusion(lists, dense_weight=0.5)
    rrf = reciprocal_rank_fusion(lists)

    # then: score gaps count (1: 0.5·0.95 + 0.5·1.0; 2: 0.5·1.0 + 0.5·0.037)
    assert [h.id for h in convex] == [1, 2, 3]
    assert convex[0].score == pytest.approx(0.5 * (0.19 / 0.20) + 0.5 * 1.0)
    assert convex[0].sources == ("dense:original", "sparse:original")
    assert convex[0].dense_score == pytest.approx(0.89)
    # rank-only fusion cannot tell: 1 and 2 tie, first seen (dense's 2) wins
    assert [h.id for h in rrf][:2] == [2, 1]


@pytest.mark.parametrize(("weight", "expected"), [(0.0, [1, 3, 2]), (1.0, [2, 3, 1])])
def test_convex_weight_moves_between_the_channels(weight, expected):
    # given
    lists = {
        "dense:original": scored((2, 0.9), (3, 0.8), (1, 0.1)),
        "sparse:original": scored((1, 9.0), (3, 5.0), (2, 1.0)),
    }

    # then
    assert [h.id for h in convex_fusion(lists, dense_weight=weight)] == expected


def test_convex_takes_a_channels_best_score_over_its_variants():
    # given: the rewrite finds 3 at the top of dense; the original barely
    lists = {
        "dense:original": scored((1, 0.9), (2, 0.8), (3, 0.5)),
        "dense:rewrite": scored((3, 0.95), (1, 0.6)),
        "sparse:original": scored((3, 2.0), (1, 1.0)),
    }

    # when
    fused = {h.id: h for h in convex_fusion(lists, dense_weight=0.5)}

    # then: 3 is best in dense (via the rewrite) and in sparse
    assert fused[3].score == pytest.approx(1.0)
    assert fused[3].sources == ("dense:original", "dense:rewrite", "sparse:original")
    assert fused[3].dense_score == pytest.approx(0.95)


def test_convex_with_one_list_keeps_raw_scores_like_rrf():
    # when
    fused = convex_fusion({"dense:original": scored((1, 0.93), (2, 0.81)), "sparse:original": []})

    # then
    assert [(h.id, h.score, h.dense_score) for h in fused] == [(1, 0.93, 0.93), (2, 0.81, 0.81)]


def test_convex_with_equal_scores_in_a_list_treats_them_alike():
    # when
    fused = convex_fusion({"dense:original": scored((1, 0.5), (2, 0.5)), "sparse:original": scored((2, 1.0))})

    # then
    assert [h.id for h in fused] == [2, 1]


def test_convex_dense_only_variants_use_the_dense_scores_unweighted():
    # when: mode dense with a rewrite, weight 0 must not zero everything
    fused = convex_fusion({"dense:original": scored((1, 0.9), (2, 0.5)), "dense:rewrite": scored((2, 0.9))}, dense_weight=0.0)

    # then
    assert [(h.id, h.score) for h in fused] == [(1, 1.0), (2, 1.0)]


def test_convex_refuses_a_weight_outside_zero_to_one():
    with pytest.raises(ValueError):
        convex_fusion({"dense:original": scored((1, 1.0))}, dense_weight=1.5)
