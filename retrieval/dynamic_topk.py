"""Dynamic top-k after rerank: keep the reranked candidates down to the first score cliff.

A cliff is a drop from one score to the next of more than 25 % of the previous score (for a
positive previous score: a share of a negative or zero score says nothing) or of more than 0.5
in absolute terms. At most 10 candidates are kept, whatever the request's top_k: dynamic top-k
chooses the count itself, and 10 bounds what the answer step reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

RELATIVE_CLIFF = 0.25
ABSOLUTE_CLIFF = 0.5
MAX_KEPT = 10
# Rerank scores are decimals sent over JSON: 0.8 → 0.6 is a drop of exactly 25 % to a reader,
# 0.25000000000000006 to floating point. Drops within this of the threshold are not cliffs.
_TOLERANCE = 1e-9

CliffKind = Literal["relative", "absolute"]


@dataclass(frozen=True)
class Cliff:
    """Where the scores were cut: `kept` of them stay; `index` is the first one dropped (0-based,
    equal to `kept`), `before` / `after` the scores on either side of the drop."""

    kept: int
    index: int | None = None  # None: no cliff, the scores ran out or reached the maximum
    before: float | None = None
    after: float | None = None
    kind: CliffKind | None = None


def find_cliff(scores: Sequence[float], *, max_k: int = MAX_KEPT) -> Cliff:
    """How many of the (descending) scores to keep, and where the first cliff is, looking at
    no more than `max_k` of them."""
    keep = max(0, min(len(scores), max_k))
    for i in range(1, keep):
        previous, current = scores[i - 1], scores[i]
        drop = previous - current
        # A drop that is both is named by the relative rule, the one that applies to most scores.
        if previous > 0 and drop > RELATIVE_CLIFF * previous + _TOLERANCE:
            return Cliff(kept=i, index=i, before=previous, after=current, kind="relative")
        if drop > ABSOLUTE_CLIFF + _TOLERANCE:
            return Cliff(kept=i, index=i, before=previous, after=current, kind="absolute")
    return Cliff(kept=keep)


def cut_at_cliff(scores: Sequence[float], *, max_k: int = MAX_KEPT) -> int:
    """How many of the (descending) scores to keep: `find_cliff(...).kept`."""
    return find_cliff(scores, max_k=max_k).kept
