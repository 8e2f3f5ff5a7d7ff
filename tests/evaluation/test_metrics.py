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
