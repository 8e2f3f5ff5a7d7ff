"""Reciprocal Rank Fusion and dynamic top-k: pure functions."""

from retrieval.dynamic_topk import cut_at_cliff
from retrieval.fusion import RankedHit, reciprocal_rank_fusion


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
