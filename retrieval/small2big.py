"""Small2Big: match on small children, answer from their neighbourhood.

A hit is expanded with its ±1 neighbours when they belong to the same document and the same
semantic parent (legacy chunks without a parent: only when heading path and locator are
identical), within a token budget. The hit stays the citation anchor: `chunk_id` and
`matched_content` never change; `content` and `context_chunk_ids` describe the expansion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .repository import ChunkRow

DEFAULT_BUDGET_TOKENS = 1536
DEFAULT_WINDOW = 1
MAX_OVERLAP_CHARS = 600
# Shorter coincidences (a repeated punctuation mark, a common word) are not chunker overlap.
MIN_OVERLAP_CHARS = 8


@dataclass(frozen=True)
class Expansion:
    content: str
    context_chunk_ids: tuple[int, ...]
    content_types: tuple[str, ...]
    asset_ids: tuple[int, ...]


def neighbour_positions(hits: Sequence[ChunkRow], *, window: int = DEFAULT_WINDOW) -> list[tuple[int, int]]:
    positions: list[tuple[int, int]] = []
    for hit in hits:
        for offset in range(1, window + 1):
            positions.append((hit.document_id, hit.ordinal - offset))
            positions.append((hit.document_id, hit.ordinal + offset))
    return [p for p in positions if p[1] >= 0]


def same_section(hit: ChunkRow, other: ChunkRow) -> bool:
    if other.document_id != hit.document_id:
        return False
    if hit.parent_id or other.parent_id:
        return hit.parent_id == other.parent_id
    return other.heading_path == hit.heading_path and other.locator == hit.locator


def expand(
    hit: ChunkRow,
    neighbours: Mapping[tuple[int, int], ChunkRow],
    *,
    budget_tokens: int = DEFAULT_BUDGET_TOKENS,
    window: int = DEFAULT_WINDOW,
) -> Expansion:
    """Grow outwards from the hit, nearest first (previous before next), within the budget."""
    chosen: list[ChunkRow] = [hit]
    used = hit.token_count
    for offset in range(1, window + 1):
        for ordinal in (hit.ordinal - offset, hit.ordinal + offset):
            candidate = neighbours.get((hit.document_id, ordinal))
            if candidate is None or not same_section(hit, candidate):
                continue
            if used + candidate.token_count > budget_tokens:
                continue
            chosen.append(candidate)
            used += candidate.token_count
    chosen.sort(key=lambda row: row.ordinal)
    # Keep only a contiguous run around the hit: a skipped neighbour must not leave a gap.
    contiguous = _contiguous_run(chosen, hit)
    return Expansion(
        content=_join_without_overlap([row.content for row in contiguous]),
        context_chunk_ids=tuple(row.id for row in contiguous),
        content_types=tuple(dict.fromkeys(row.content_type for row in contiguous)),
        asset_ids=tuple(dict.fromkeys(a for row in contiguous for a in row.asset_ids)),
    )


def _contiguous_run(rows: list[ChunkRow], hit: ChunkRow) -> list[ChunkRow]:
    index = next(i for i, row in enumerate(rows) if row.id == hit.id)
    start = index
    while start > 0 and rows[start - 1].ordinal == rows[start].ordinal - 1:
        start -= 1
    end = index
    while end + 1 < len(rows) and rows[end + 1].ordinal == rows[end].ordinal + 1:
        end += 1
    return rows[start : end + 1]


def _join_without_overlap(texts: list[str]) -> str:
    """Concatenate consecutive children, dropping the overlap the chunker repeated at each start."""
    if not texts:
        return ""
    joined = texts[0]
    for text in texts[1:]:
        overlap = _overlap_length(joined, text)
        joined = joined + ("\n" if overlap == 0 else "") + text[overlap:]
    return joined


def _overlap_length(left: str, right: str) -> int:
    limit = min(len(left), len(right), MAX_OVERLAP_CHARS)
    for size in range(limit, MIN_OVERLAP_CHARS - 1, -1):
        if left.endswith(right[:size]):
            return size
    return 0
