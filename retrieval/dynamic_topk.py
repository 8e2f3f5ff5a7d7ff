"""Dynamic top-k after rerank: stop at a score cliff."""

from __future__ import annotations

from collections.abc import Sequence

RELATIVE_CLIFF = 0.25
ABSOLUTE_CLIFF = 0.5


def cut_at_cliff(scores: Sequence[float], *, max_k: int) -> int:
    """How many of the (descending) scores to keep: up to max_k, stopping before the first drop
    larger than 25 % of the previous score or larger than 0.5 in absolute terms."""
    keep = min(len(scores), max_k)
    for i in range(1, keep):
        previous, current = scores[i - 1], scores[i]
        drop = previous - current
        if drop > ABSOLUTE_CLIFF or (previous > 0 and drop / previous > RELATIVE_CLIFF):
            return i
    return keep
