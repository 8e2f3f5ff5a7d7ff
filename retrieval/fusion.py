"""Reciprocal Rank Fusion: merge ranked lists by rank, never by their incomparable raw scores."""

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
    if len(valid) == 1:
        (name, hits), = valid.items()
        seen: set[int] = set()
        single: list[FusedHit] = []
        for hit in hits:
            if hit.id not in seen:
                seen.add(hit.id)
                single.append(FusedHit(hit.id, hit.document_id, hit.score, (name,)))
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
    fused = [FusedHit(i, documents[i], scores[i], tuple(sources[i])) for i in ordered]
    return fused[:limit] if limit is not None else fused
