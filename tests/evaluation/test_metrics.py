"""Ranking metrics (binary relevance)."""

import math

import pytest

from evaluation.metrics import dedupe, hit_at, mrr_at, ndcg_at, percentile, recall_at, summarize


def test_recall_and_hit():
    ranked = ["a", "b", "c", "d"]
    assert recall_at(ranked, {"b", "z"}, 2) == 0.5
    assert hit_at(ranked, {"d"}, 3) == 0.0
    assert hit_at(ranked, {"d"}, 4) == 1.0


def test_mrr_uses_first_relevant_rank_within_ten():
    assert mrr_at(["x", "y", "a"], {"a"}) == pytest.approx(1 / 3)
    assert mrr_at(["x"] * 10 + ["a"], {"a"}) == 0.0


def test_ndcg_binary():
    assert ndcg_at(["a", "x"], {"a"}) == 1.0
    assert ndcg_at(["x", "a"], {"a"}) == pytest.approx(1 / math.log2(3))
    assert ndcg_at(["x"], {"a"}) == 0.0


def test_dedupe_keeps_first_occurrence():
    assert dedupe(["d1", "d2", "d1", "d3"]) == ["d1", "d2", "d3"]


def test_percentile_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 95) == 95
    assert percentile([], 50) == 0.0


def test_summarize_averages_over_queries():
    summary = summarize([(["a"], {"a"}), (["x"], {"b"})], k=5)
    assert summary == {"recall@5": 0.5, "hit@5": 0.5, "mrr@10": 0.5, "ndcg@10": 0.5}


def test_several_gold_documents_count_each_for_recall_and_ndcg():
    # given: two gold documents, found at ranks 1 and 3
    ranked, gold = ["a", "x", "b", "y"], {"a", "b"}

    # then: recall@2 sees one of two; nDCG = (1 + 1/log2(4)) / (1 + 1/log2(3))
    assert recall_at(ranked, gold, 2) == 0.5
    assert recall_at(ranked, gold, 3) == 1.0
    assert ndcg_at(ranked, gold) == pytest.approx((1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3)))
    assert mrr_at(ranked, gold) == 1.0


def test_nothing_found_scores_zero_everywhere():
    summary = summarize([(["x", "y"], {"a"}), ([], {"b"})], k=5)
    assert summary == {"recall@5": 0.0, "hit@5": 0.0, "mrr@10": 0.0, "ndcg@10": 0.0}


def test_tied_duplicates_of_one_document_count_once_after_dedupe():
    # given: three chunks of document a ahead of document b (the runner dedupes before scoring)
    ranked = dedupe(["a", "a", "a", "b"])

    # then: b is second, not fourth
    assert ranked == ["a", "b"]
    assert mrr_at(ranked, {"b"}) == 0.5
