"""Fusion of the channels' ranked lists: convex (score-aware, the default) and Reciprocal Rank Fusion
(rank-only, the customary k=60; selectable with RAG_FUSION=rrf or a request's `fusion`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

RRF_K = 60


@dataclass(frozen=True)
class RankedHit:
    id: int
    document_id: int
    score: float


@dataclass(frozen=True)
class FusedHit:
    id: int
    document_id: int
    score: float
    sources: tuple[str, ...]  # names of the lists the hit came from, in list order
    dense_score: float | None = None  # its best raw cosine in a dense list, if it was in one


def reciprocal_rank_fusion(
    lists: Mapping[str, Sequence[RankedHit]], *, k: int = RRF_K, limit: int | None = None
) -> list[FusedHit]:
    """Fuse named ranked lists: score(d) = Σ 1 / (k + rank_i(d)), rank starting at 1.

    Pure and stable: ties keep the order in which hits were first seen (list order, then rank).
    A hit repeated inside one list counts once, at its best rank. Empty lists are ignored; with
    exactly one non-empty list its raw scores are kept, because there is nothing to fuse and the
    raw score (cosine, BM25) is more informative than 1/(k + rank).
    """
    valid = {name: hits for name, hits in lists.items() if hits}
    if not valid:
        return []
    cosines = _dense_scores(valid)
    if len(valid) == 1:
        (name, hits), = valid.items()
        seen: set[int] = set()
        single: list[FusedHit] = []
        for hit in hits:
            if hit.id not in seen:
                seen.add(hit.id)
                single.append(FusedHit(hit.id, hit.document_id, hit.score, (name,), cosines.get(hit.id)))
        return single[:limit] if limit is not None else single

    scores: dict[int, float] = {}
    sources: dict[int, list[str]] = {}
    documents: dict[int, int] = {}
    first_seen: dict[int, int] = {}
    for name, hits in valid.items():
        seen_here: set[int] = set()
        rank = 0
        for hit in hits:
            if hit.id in seen_here:
                continue
            seen_here.add(hit.id)
            rank += 1
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (k + rank)
            sources.setdefault(hit.id, []).append(name)
            documents.setdefault(hit.id, hit.document_id)
            first_seen.setdefault(hit.id, len(first_seen))
    ordered = sorted(scores, key=lambda hit_id: (-scores[hit_id], first_seen[hit_id]))
    fused = [FusedHit(i, documents[i], scores[i], tuple(sources[i]), cosines.get(i)) for i in ordered]
    return fused[:limit] if limit is not None else fused


def _dense_scores(lists: Mapping[str, Sequence[RankedHit]]) -> dict[int, float]:
    best: dict[int, float] = {}
    for name, hits in lists.items():
        if channel_of(name) == "dense":
            for hit in hits:
                best[hit.id] = max(best.get(hit.id, float("-inf")), hit.score)
    return best


# --- score-aware fusion --------------------------------------------------------------------------

DEFAULT_DENSE_WEIGHT = 0.5


def channel_of(list_name: str) -> str:
    """"dense:original", "dense:rewrite", "dense:hyde" → "dense"; "sparse:…" → "sparse"."""
    return list_name.split(":", 1)[0]


def convex_fusion(
    lists: Mapping[str, Sequence[RankedHit]], *, dense_weight: float = DEFAULT_DENSE_WEIGHT,
    limit: int | None = None,
) -> list[FusedHit]:
    """Weighted sum of min-max normalised scores: score(d) = w·dense(d) + (1 − w)·sparse(d).

    Each list's scores are scaled to [0, 1] over that list (its best hit 1, its last 0; a list
    of equal scores gives 1 to all), so cosine and BM25 become comparable within the query. A
    channel's score for a hit is its best over the channel's lists (the original question, the
    rewrite, HyDE); a hit missing from a channel's lists gets 0 there. Unlike RRF the size of the
    score gaps counts: a BM25 hit far ahead of the rest stays ahead even when the dense channel
    ranks it lower, which is why this fusion does not fall below its better channel on the sets
    measured (evaluation/README.md), where equal-weight RRF k=60 does.

    With one non-empty list, raw scores are kept (as `reciprocal_rank_fusion` does). Stable:
    ties keep first-seen order.
    """
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError("dense_weight must lie in [0, 1]")
    valid = {name: hits for name, hits in lists.items() if hits}
    if len(valid) <= 1:
        return reciprocal_rank_fusion(valid, limit=limit)
    weights = {"dense": dense_weight, "sparse": 1.0 - dense_weight}
    channels: dict[str, dict[int, float]] = {}
    sources: dict[int, list[str]] = {}
    documents: dict[int, int] = {}
    first_seen: dict[int, int] = {}
    for name, hits in valid.items():
        best = channels.setdefault(channel_of(name), {})
        for hit_id, score in _min_max(hits).items():
            best[hit_id] = max(best.get(hit_id, 0.0), score)
        for hit in hits:
            if name not in sources.setdefault(hit.id, []):
                sources[hit.id].append(name)
            documents.setdefault(hit.id, hit.document_id)
            first_seen.setdefault(hit.id, len(first_seen))
    if len(channels) == 1:
        weights = {channel: 1.0 for channel in channels}  # dense-only or sparse-only variants
    total = sum(weights.get(channel, 0.5) for channel in channels) or 1.0
    scores = {
        hit_id: sum(weights.get(channel, 0.5) * best.get(hit_id, 0.0) for channel, best in channels.items()) / total
        for hit_id in first_seen
    }
    cosines = _dense_scores(valid)
    ordered = sorted(scores, key=lambda hit_id: (-scores[hit_id], first_seen[hit_id]))
    fused = [FusedHit(i, documents[i], scores[i], tuple(sources[i]), cosines.get(i)) for i in ordered]
    return fused[:limit] if limit is not None else fused


def _min_max(hits: Sequence[RankedHit]) -> dict[int, float]:
    best: dict[int, float] = {}
    for hit in hits:
        best[hit.id] = max(best.get(hit.id, float("-inf")), hit.score)
    high, low = max(best.values()), min(best.values())
    if high <= low:
        return {hit_id: 1.0 for hit_id in best}
    return {hit_id: (score - low) / (high - low) for hit_id, score in best.items()}
