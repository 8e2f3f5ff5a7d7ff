"""Ranking metrics with binary relevance (qrels list the relevant document ids per query)."""

from __future__ import annotations

import math
from collections.abc import Sequence, Set


def recall_at(ranked: Sequence[str], relevant: Set[str], k: int) -> float:
    if not relevant:
        return 0.0
    return len(set(ranked[:k]) & relevant) / len(relevant)


def hit_at(ranked: Sequence[str], relevant: Set[str], k: int) -> float:
    return 1.0 if set(ranked[:k]) & relevant else 0.0


def mrr_at(ranked: Sequence[str], relevant: Set[str], k: int = 10) -> float:
    for position, item in enumerate(ranked[:k], start=1):
        if item in relevant:
            return 1.0 / position
    return 0.0


def ndcg_at(ranked: Sequence[str], relevant: Set[str], k: int = 10) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, item in enumerate(ranked[:k]) if item in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / ideal if ideal else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


def dedupe(items: Sequence[str]) -> list[str]:
    """Order-preserving de-duplication (several chunks of one document count once)."""
    return list(dict.fromkeys(items))


def summarize(rankings: Sequence[tuple[Sequence[str], Set[str]]], *, k: int) -> dict[str, float]:
    n = len(rankings) or 1
    return {
        f"recall@{k}": round(sum(recall_at(r, rel, k) for r, rel in rankings) / n, 4),
        f"hit@{k}": round(sum(hit_at(r, rel, k) for r, rel in rankings) / n, 4),
        "mrr@10": round(sum(mrr_at(r, rel, 10) for r, rel in rankings) / n, 4),
        "ndcg@10": round(sum(ndcg_at(r, rel, 10) for r, rel in rankings) / n, 4),
    }
