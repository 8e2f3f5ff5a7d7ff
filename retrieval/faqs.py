"""FAQ retrieval: which curated questions match a user question.

Each FAQ is indexed once per phrasing (standard and similar questions). Per query variant the
dense and sparse channels run concurrently on the FAQ collection; hits are folded to FAQs (best
rank per list) and fused with RRF. Rows come from the database (enabled FAQs of this knowledge
base only), and every hit gets a provider-independent `score`: the lexical similarity of the
user question to the FAQ's closest phrasing (`engines.lexical.similarity`), 1.0 when they are
equal after normalisation (`exact`). Ranking is by that score, then fusion order, so thresholds
("answer directly above 0.8") mean the same whatever embedder the knowledge base uses.

Candidates are cached under the knowledge base's cache epoch (FAQ edits move it). A failing
channel degrades like document retrieval; all channels failing yields no FAQ hits and the
degradation `faq_search_failed`, because documents can still answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from django.db import DatabaseError
from django.utils.translation import gettext as _

from engines.lexical import normalise, similarity
from engines.ports import Embedder, RetrievalCache, VectorStore
from knowledge.models import FAQ

from . import cache as l2
from .channels import query_vector, run_channels
from .contracts import (
    CacheEvent,
    CacheSummary,
    ChannelError,
    FactsUnavailable,
    FaqHit,
    StageTiming,
)
from .fusion import RankedHit, reciprocal_rank_fusion
from .relevance import semantic_relevance

EpochReader = Callable[[int], tuple[int, bool]]


@dataclass(frozen=True)
class FaqSearchRequest:
    kb_id: int
    variants: tuple[str, ...]  # the original question first
    top_k: int = 5
    candidate_k: int = 20
    use_cache: bool = True
    # More knowledge bases whose FAQs compete with `kb_id`'s in one ranking (access checked).
    also_kb_ids: tuple[int, ...] = ()

    @property
    def kb_ids(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys((self.kb_id, *self.also_kb_ids)))


@dataclass(frozen=True)
class FaqSearchResponse:
    hits: tuple[FaqHit, ...]
    variants: tuple[str, ...]
    top_k: int  # how many candidates were asked for: a later stage may reuse them if it needs ≤
    cache: CacheSummary
    channel_errors: tuple[ChannelError, ...]
    degradations: tuple[str, ...]
    stage_timings: tuple[StageTiming, ...]
    elapsed_ms: float

    @property
    def top_score(self) -> float:
        return self.hits[0].score if self.hits else 0.0

    def as_dict(self) -> dict:
        return {
            "hits": [hit.as_dict() for hit in self.hits],
            "variants": list(self.variants),
            "top_k": self.top_k,
            "cache": self.cache.as_dict(),
            "channel_errors": [asdict(e) for e in self.channel_errors],
            "degradations": list(self.degradations),
            "stage_timings_ms": [asdict(t) for t in self.stage_timings],
            "elapsed_ms": self.elapsed_ms,
        }


class FaqRetrieval:
    def __init__(
        self,
        *,
        embedder: Embedder,
        store: VectorStore,
        executor: ThreadPoolExecutor,
        cache: RetrievalCache | None = None,
        epochs: EpochReader | None = None,
        load_faqs: Callable[[Sequence[int], list[int]], dict[int, dict]] | None = None,
        kbs_with_faqs: Callable[[Sequence[int]], set[int]] | None = None,
        dictionary: tuple[str, ...] = (),
    ) -> None:
        self.embedder = embedder
        self.dictionary = dictionary
        self.store = store
        self.executor = executor
        self.cache = cache if epochs is not None else None
        self.epochs = epochs
        self.load_faqs = load_faqs or load_enabled_faqs
        self.kbs_with_faqs = kbs_with_faqs or kbs_with_enabled_faqs

    def search(self, request: FaqSearchRequest, *, cancel: threading.Event | None = None) -> FaqSearchResponse:
        started = time.perf_counter()
        events: list[CacheEvent] = []
        timings: list[StageTiming] = []
        try:
            curated = self.kbs_with_faqs(request.kb_ids)
        except DatabaseError as exc:
            raise FactsUnavailable(_("FAQ 数据暂时无法读取，请稍后重试。")) from exc
        # Only the knowledge bases that have FAQs are searched (and key the cache).
        kb_ids = tuple(kb_id for kb_id in request.kb_ids if kb_id in curated)
        if not kb_ids:
            # Most questions of a KB without FAQs would pay for an embedding and two searches
            # that cannot find anything (and BM25 over an empty collection is undefined).
            return self._response(request, (), events, [], [], timings, started)
        key = None
        if request.use_cache and self.cache is not None:
            epochs = [(kb_id, *self.epochs(kb_id)) for kb_id in kb_ids]
            from_l1 = all(hit for _, _, hit in epochs)
            events.append(CacheEvent("epoch", from_l1, "l1" if from_l1 else "l3"))
            key = l2.faq_candidates_key(
                kb=[[kb_id, epoch] for kb_id, epoch, _ in epochs], variants=list(request.variants), top_k=request.top_k,
                candidate_k=request.candidate_k, embedding=[self.embedder.model, self.embedder.dimension],
                dictionary=list(self.dictionary),
            )
            cached = self.cache.get(key)
            events.append(CacheEvent("faq_retrieval", cached is not None, "faq"))
            if cached is not None:
                hits = tuple(FaqHit(**{**h, "rank_sources": tuple(h["rank_sources"])}) for h in cached)
                return self._response(request, hits, events, [], [], timings, started)

        errors: list[ChannelError] = []
        degradations: list[str] = []
        lists = self._recall(request, kb_ids, errors, degradations, timings, events, cancel)
        fused = reciprocal_rank_fusion(lists, limit=request.candidate_k)
        stage = time.perf_counter()
        try:
            rows = self.load_faqs(kb_ids, [hit.id for hit in fused])
        except DatabaseError as exc:
            raise FactsUnavailable(_("FAQ 数据暂时无法读取，请稍后重试。")) from exc
        timings.append(StageTiming("faq_rows", _ms(stage)))
        # The original question's own cosines: a rewrite's would judge another question.
        dense = {hit.id: hit.score for hit in lists.get("faq_dense:original", ())}
        hits = _score(request.variants[0], fused, rows, dense=dense,
                      calibration=self.embedder.similarity_range)[: request.top_k]
        if key is not None and not degradations:
            self.cache.set(key, [asdict(hit) for hit in hits], ttl=self.cache.candidates_ttl)
        return self._response(request, tuple(hits), events, errors, degradations, timings, started)

    def _recall(self, request, kb_ids, errors, degradations, timings, events, cancel) -> dict[str, list[RankedHit]]:
        jobs: dict[str, Callable[[], list[RankedHit]]] = {}
        for label, variant in zip(("original", "rewrite", "variant2", "variant3"), request.variants):
            jobs[f"faq_dense:{label}"] = self._dense_job(request, kb_ids, variant, events)
            jobs[f"faq_sparse:{label}"] = self._sparse_job(request, kb_ids, variant)
        results, failures = run_channels(jobs, executor=self.executor, cancel=cancel)
        lists: dict[str, list[RankedHit]] = {}
        for name in jobs:
            if name in failures:
                errors.append(ChannelError(name, getattr(failures[name], "code", "error"), _("FAQ 检索通道失败。")))
                continue
            hits, elapsed = results[name]
            timings.append(StageTiming(f"channel:{name}", elapsed))
            lists[name] = hits
        if jobs and not lists:
            degradations.append("faq_search_failed")
        return lists

    def _dense_job(self, request: FaqSearchRequest, kb_ids: tuple[int, ...], text: str, events: list[CacheEvent]):
        def job() -> list[RankedHit]:
            vector = self._query_vector(text, events, use_cache=request.use_cache)
            hits = self.store.search_faq_dense(kb_id=kb_ids[0], vector=vector, limit=request.candidate_k,
                                               also_kb_ids=kb_ids[1:])
            return _per_faq(hits)

        return job

    def _sparse_job(self, request: FaqSearchRequest, kb_ids: tuple[int, ...], text: str):
        def job() -> list[RankedHit]:
            hits = self.store.search_faq_sparse(
                kb_id=kb_ids[0], query=text, limit=request.candidate_k, dictionary=self.dictionary,
                also_kb_ids=kb_ids[1:],
            )
            return _per_faq(hits)

        return job

    def _query_vector(self, text: str, events: list[CacheEvent], *, use_cache: bool) -> list[float]:
        return query_vector(embedder=self.embedder, cache=self.cache, text=text, events=events,
                            use_cache=use_cache)

    def _response(self, request, hits, events, errors, degradations, timings, started) -> FaqSearchResponse:
        hit_count = sum(1 for e in events if e.hit)
        return FaqSearchResponse(
            hits=tuple(hits),
            variants=tuple(request.variants),
            top_k=request.top_k,
            cache=CacheSummary(
                enabled=request.use_cache and self.cache is not None,
                hit_count=hit_count,
                miss_count=len(events) - hit_count,
                events=tuple(events),
            ),
            channel_errors=tuple(errors),
            degradations=tuple(degradations),
            stage_timings=tuple(timings),
            elapsed_ms=_ms(started),
        )


def kbs_with_enabled_faqs(kb_ids: Sequence[int]) -> set[int]:
    if len(kb_ids) == 1:
        return set(kb_ids) if FAQ.objects.filter(knowledge_base_id=kb_ids[0], enabled=True).exists() else set()
    return set(
        FAQ.objects.filter(knowledge_base_id__in=list(kb_ids), enabled=True)
        .values_list("knowledge_base_id", flat=True).distinct()
    )


def load_enabled_faqs(kb_ids: Sequence[int], faq_ids: list[int]) -> dict[int, dict]:
    if not faq_ids:
        return {}
    return {
        row["id"]: row
        for row in FAQ.objects.filter(knowledge_base_id__in=list(kb_ids), pk__in=faq_ids, enabled=True).values(
            "id", "knowledge_base_id", "question", "similar_questions", "answer", "source_tag"
        )
    }


def _per_faq(hits) -> list[RankedHit]:
    """Records are phrasings; a FAQ ranks where its best phrasing ranks."""
    seen: set[int] = set()
    ranked: list[RankedHit] = []
    for hit in hits:
        if hit.document_id not in seen:
            seen.add(hit.document_id)
            ranked.append(RankedHit(hit.document_id, hit.document_id, hit.score))
    return ranked


def _score(question: str, fused, rows: dict[int, dict], *, dense: dict[int, float] | None = None,
           calibration: tuple[float, float] | None = None) -> list[FaqHit]:
    wanted = normalise(question)
    scored: list[tuple[float, int, FaqHit]] = []
    for order, hit in enumerate(fused):
        row = rows.get(hit.id)
        if row is None:  # disabled or deleted since it was indexed
            continue
        phrasings = [row["question"], *(row["similar_questions"] or [])]
        best_score, best = max(((similarity(question, p), p) for p in phrasings), key=lambda item: item[0])
        exact = any(normalise(p) == wanted for p in phrasings)
        if exact:
            best_score, best = 1.0, next(p for p in phrasings if normalise(p) == wanted)
        scored.append(
            (
                best_score,
                order,
                FaqHit(
                    faq_id=row["id"], question=row["question"], matched_question=best,
                    answer=row["answer"], score=round(best_score, 6), rank_sources=hit.sources,
                    exact=exact, source_tag=row["source_tag"],
                    semantic=_semantic((dense or {}).get(hit.id), calibration),
                    kb_id=row["knowledge_base_id"],
                ),
            )
        )
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [hit for _, _, hit in scored]


def _semantic(cosine: float | None, calibration: tuple[float, float] | None) -> float | None:
    value = semantic_relevance(cosine, calibration)
    return None if value is None else round(value, 4)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
