"""One question over knowledge bases of different embedding spaces.

Knowledge bases that share an embedding space (model, dimension, text analysis) are searched by
one `RetrievalService` / `FaqRetrieval` call as one scope: one collection, one search per
channel, one fused list (`RetrievalRequest.also_kb_ids`). Only bases whose vectors cannot be
compared need a search each; this module runs those and merges them on what is comparable across
spaces: a result's calibrated `relevance` (documents) and an FAQ hit's lexical `score`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from .contracts import (
    NO_DOCUMENT_MATCHES_FILTERS,
    CacheSummary,
    KbScopeTrace,
    RetrievalRequest,
    RetrievalResponse,
    RetrievalResult,
    RetrievalTrace,
)
from .faqs import FaqSearchRequest, FaqSearchResponse


class DocumentSearch(Protocol):
    def retrieve(
        self, request: RetrievalRequest, *, cancel: threading.Event | None = None
    ) -> RetrievalResponse: ...


class FaqSearch(Protocol):
    def search(
        self, request: FaqSearchRequest, *, cancel: threading.Event | None = None
    ) -> FaqSearchResponse: ...


@dataclass(frozen=True)
class FederatedRetrieval:
    """Document retrieval over several spaces; each member searches its own knowledge bases
    (the first of them its primary). The request's `kb_id` belongs to the first member."""

    members: tuple[tuple[DocumentSearch, tuple[int, ...]], ...]

    def retrieve(self, request: RetrievalRequest, *, cancel: threading.Event | None = None) -> RetrievalResponse:
        # The web is searched once, by the member holding the asked knowledge base (the first).
        responses = [
            search.retrieve(replace(request, kb_id=kb_ids[0], also_kb_ids=kb_ids[1:],
                                    enable_web_search=request.enable_web_search and index == 0), cancel=cancel)
            for index, (search, kb_ids) in enumerate(self.members)
        ]
        results = sorted(
            (result for response in responses for result in response.results), key=_document_rank
        )[: request.top_k]
        first = responses[0].trace
        traces = [response.trace for response in responses]
        trace = replace(
            first,
            ready_document_count=sum(t.ready_document_count for t in traces),
            candidate_counts=_summed(t.candidate_counts for t in traces),
            stage_timings=tuple(timing for t in traces for timing in t.stage_timings),
            channel_errors=tuple(error for t in traces for error in t.channel_errors),
            degradations=tuple(dict.fromkeys(d for t in traces for d in t.degradations)),
            cache=_merged_cache([t.cache for t in traces]),
            empty_reason="" if any(t.ready_document_count for t in traces) else _empty_reason(traces),
            total_ms=round(sum(t.total_ms for t in traces), 2),
            notes=tuple(dict.fromkeys(n for t in traces for n in t.notes)),
            embedding_model=",".join(dict.fromkeys(t.embedding_model for t in traces)),
            knowledge_bases=tuple(kb for t in traces for kb in (t.knowledge_bases or (_scope_of(t),))),
            filter_admitted_count=sum(t.filter_admitted_count for t in traces),
            filter_ready_count=sum(t.filter_ready_count for t in traces),
        )
        return RetrievalResponse(results=tuple(results), trace=trace)


@dataclass(frozen=True)
class FederatedFaqs:
    """FAQ search over several spaces, merged on the lexical score every hit carries."""

    members: tuple[tuple[FaqSearch, tuple[int, ...]], ...]

    def search(self, request: FaqSearchRequest, *, cancel: threading.Event | None = None) -> FaqSearchResponse:
        responses = [
            search.search(replace(request, kb_id=kb_ids[0], also_kb_ids=kb_ids[1:]), cancel=cancel)
            for search, kb_ids in self.members
        ]
        hits = sorted((hit for r in responses for hit in r.hits), key=lambda hit: -hit.score)
        return FaqSearchResponse(
            hits=tuple(hits[: request.top_k]),
            variants=request.variants,
            top_k=request.top_k,
            cache=_merged_cache([r.cache for r in responses]),
            channel_errors=tuple(e for r in responses for e in r.channel_errors),
            degradations=tuple(dict.fromkeys(d for r in responses for d in r.degradations)),
            stage_timings=tuple(t for r in responses for t in r.stage_timings),
            elapsed_ms=round(sum(r.elapsed_ms for r in responses), 2),
        )


def grouped_by_space(kbs: Sequence, *, space) -> list[list]:
    """`kbs` in groups that share `space(kb)`, in first-seen order, each in its given order."""
    groups: dict[object, list] = {}
    for kb in kbs:
        groups.setdefault(space(kb), []).append(kb)
    return list(groups.values())


def _empty_reason(traces: Sequence[RetrievalTrace]) -> str:
    """Why nothing could answer: the filters, when they are what left a space without documents."""
    reasons = [t.empty_reason for t in traces]
    return NO_DOCUMENT_MATCHES_FILTERS if NO_DOCUMENT_MATCHES_FILTERS in reasons else reasons[0]


def _scope_of(trace: RetrievalTrace) -> KbScopeTrace:
    return KbScopeTrace(kb_id=trace.kb_id, version=trace.version, cache_epoch=trace.cache_epoch,
                        ready_document_count=trace.ready_document_count, empty_reason=trace.empty_reason)


def _document_rank(result: RetrievalResult) -> tuple[float, float]:
    return (-result.relevance, -result.score)


def _summed(counts) -> dict[str, int]:
    total: dict[str, int] = {}
    for mapping in counts:
        for name, value in mapping.items():
            total[name] = total.get(name, 0) + value
    return total


def _merged_cache(summaries: list[CacheSummary]) -> CacheSummary:
    return CacheSummary(
        enabled=any(s.enabled for s in summaries),
        hit_count=sum(s.hit_count for s in summaries),
        miss_count=sum(s.miss_count for s in summaries),
        events=tuple(e for s in summaries for e in s.events),
    )
