"""RetrievalService: choose the evidence for a question. It builds no prompt and writes no answer.

Stages: READY facts (∩ document_ids and metadata filters) → epoch + cache → query variants (optional rewrite) →
concurrent dense / sparse (and HyDE) channels → re-filter by READY → fusion (convex by default,
RRF k=60 selectable) → optional rerank →
top-k (optionally dynamic) → optional Small2Big → assets. Failure semantics:

| stage failing        | behaviour                                        |
|----------------------|--------------------------------------------------|
| rewrite              | original query continues, `query_rewrite_failed`  |
| one channel          | the others continue, channel error + degradation |
| all channels         | `AllChannelsFailed`                               |
| rerank               | fusion order kept, `rerank_failed`                |
| HyDE generation      | the question's channels answer, `hyde_failed`     |
| parent expansion     | the hit alone, `parent_expansion_failed`          |
| web search           | the KB's results alone, `web_search_failed`       |
| cancellation         | `RetrievalCancelled` propagates, not a degradation|

Web search (`RetrievalRequest.enable_web_search`, `retrieval.web`) runs beside the channels and
joins fusion as one more list; such a request bypasses the candidates cache.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property

from django.conf import settings
from django.utils.translation import gettext as _

from ragsite.executors import RETRIEVAL, pool

from engines.glossary import is_foreign, search_words
from engines.ports import (
    ChatMessage,
    ChatModel,
    DocumentFilter,
    Embedder,
    KbDocuments,
    ProviderError,
    QueryRewriter,
    Reranker,
    RetrievalCache,
    VectorStore,
    WebSearch,
)

from . import cache as l2  # key builders only; the store itself is the injected port
from .channels import query_vector, run_channels
from .contracts import (
    AllChannelsFailed,
    CacheEvent,
    CacheSummary,
    ChannelError,
    DynamicTopKTrace,
    FactsUnavailable,
    HydeTrace,
    NO_ACTIVE_VERSION,
    NO_DOCUMENT_MATCHES_FILTERS,
    KbScopeTrace,
    RetrievalCancelled,
    RetrievalRequest,
    RetrievalResponse,
    RetrievalResult,
    RetrievalTrace,
    StageTiming,
)
from .dynamic_topk import MAX_KEPT, find_cliff
from .fusion import (
    DEFAULT_DENSE_WEIGHT,
    FusedHit,
    RankedHit,
    RRF_K,
    convex_fusion,
    reciprocal_rank_fusion,
)
from .relevance import lexical_relevance, relevance, semantic_relevance
from .repository import ChunkRow, ReadyFacts, Repository
from .small2big import DEFAULT_BUDGET_TOKENS, expand, neighbour_positions
from .web import NO_WEB, WEB_CHANNEL, PendingWebSearch, WebCandidates, is_web_id

EpochReader = Callable[[int], tuple[int, bool]]

def channel_pool() -> ThreadPoolExecutor:
    """A bounded pool shared by all requests: concurrency per request, a ceiling per process."""
    return pool(RETRIEVAL)


HYDE_PROMPT = (
    "请针对下面的问题写一段简短、像企业内部资料原文一样的假设性回答（80 字以内），"
    "只输出这段文字，不要解释。\n问题：{question}"
)


def hyde_text(question: str, hypothesis: str) -> str:
    """What the HyDE channel embeds: the question, then the hypothetical answer. The question
    keeps the vector anchored to what was asked when the model's guess drifts (a wrong product,
    an invented figure); the guess adds the words an answer is written in."""
    return f"{question}\n{hypothesis}"


@dataclass
class _Run:
    """Mutable bookkeeping of one retrieval; frozen into the trace at the end."""

    started: float = field(default_factory=time.perf_counter)
    timings: list[StageTiming] = field(default_factory=list)
    events: list[CacheEvent] = field(default_factory=list)
    errors: list[ChannelError] = field(default_factory=list)
    degradations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    fusion: str = ""
    # Written by the HyDE channel's own thread only, read after every channel has finished.
    hyde: HydeTrace | None = None
    dynamic_top_k: DynamicTopKTrace | None = None

    def timed(self, stage: str, started: float) -> None:
        self.timings.append(StageTiming(stage, round((time.perf_counter() - started) * 1000, 2)))

    def elapsed_ms(self) -> float:
        return round((time.perf_counter() - self.started) * 1000, 2)


@dataclass(frozen=True)
class _Filters:
    """What the vector store may return: the first knowledge base that has READY documents,
    then the others (`KbDocuments`), each with the shorter form of its document filter."""

    first: KbDocuments
    also: tuple[KbDocuments, ...]


@dataclass(frozen=True)
class _Scope:
    """The READY facts of every knowledge base a question reads, `kb_ids[0]` the asked one."""

    kb_ids: tuple[int, ...]
    facts: dict[int, ReadyFacts]

    @property
    def primary(self) -> ReadyFacts:
        return self.facts[self.kb_ids[0]]

    @property
    def ready_count(self) -> int:
        return sum(facts.ready_count for facts in self.facts.values())

    @cached_property
    def ready_ids(self) -> frozenset[int] | None:
        """Every document that may answer, when each base listed them; None when some base only
        counted them (its candidates are confirmed after the search)."""
        if any(facts.ready_ids is None for facts in self.facts.values()):
            return None
        if len(self.kb_ids) == 1:
            return self.primary.ready_ids
        return frozenset().union(*(facts.ready_ids for facts in self.facts.values()))

    @property
    def empty_reason(self) -> str:
        if self.ready_count:
            return ""
        if len(self.kb_ids) > 1 and any(facts.empty_reason == NO_DOCUMENT_MATCHES_FILTERS for facts in self.facts.values()):
            return NO_DOCUMENT_MATCHES_FILTERS
        if len(self.kb_ids) > 1 and any(facts.empty_reason != NO_ACTIVE_VERSION for facts in self.facts.values()):
            # Some base of the scope is published: the scope is empty, not unpublished.
            return "no_ready_documents"
        return self.primary.empty_reason or "no_ready_documents"

    def document_filters(self) -> tuple[_Filters, str]:
        """The filters, and which expression went to the store ("in", "not_in", "none", or
        "mixed" when knowledge bases differ)."""
        scopes: list[KbDocuments] = []
        kinds: list[str] = []
        for kb_id in self.kb_ids:
            facts = self.facts[kb_id]
            if facts.ready_count:
                documents, kind = _document_filter(facts)
                scopes.append(KbDocuments(kb_id, documents))
                kinds.append(kind)
        kind = kinds[0] if len(set(kinds)) == 1 else "mixed"
        return _Filters(first=scopes[0], also=tuple(scopes[1:])), kind

    @property
    def before_filters(self) -> int:
        """The READY documents the request's metadata filters chose from, over the scope."""
        return sum(facts.before_filters or 0 for facts in self.facts.values())

    def traces(self, epochs: dict[int, int]) -> tuple[KbScopeTrace, ...]:
        return tuple(
            KbScopeTrace(kb_id=kb_id, version=self.facts[kb_id].version, cache_epoch=epochs.get(kb_id),
                         ready_document_count=self.facts[kb_id].ready_count,
                         empty_reason=self.facts[kb_id].empty_reason)
            for kb_id in self.kb_ids
        )


def _document_filter(facts: ReadyFacts) -> tuple[DocumentFilter, str]:
    """Push down the shorter of `document_id in READY` / `not in the rest` (kb always)."""
    if facts.other_count <= 0:
        return DocumentFilter(exclude=()), "none"
    if facts.other_ids is not None and (facts.ready_ids is None or len(facts.other_ids) < len(facts.ready_ids)):
        return DocumentFilter(exclude=tuple(sorted(facts.other_ids))), "not_in"
    if facts.ready_ids is None:
        raise RuntimeError("READY facts listed neither side although some documents may not answer")
    return DocumentFilter(include=tuple(sorted(facts.ready_ids))), "in"


def _context_variants(request: RetrievalRequest) -> list[str]:
    return [v for v in dict.fromkeys(request.context_variants) if v.strip() and v != request.question]


class RetrievalService:
    def __init__(
        self,
        *,
        repository: Repository,
        embedder: Embedder,
        store: VectorStore,
        rewriter: QueryRewriter,
        reranker: Reranker | None,
        hyde_model: ChatModel | None = None,
        cache: RetrievalCache | None = None,
        epochs: EpochReader | None = None,
        executor: ThreadPoolExecutor | None = None,
        parent_budget_tokens: int = DEFAULT_BUDGET_TOKENS,
        dictionary: tuple[str, ...] = (),
        web_search: WebSearch | None = None,
    ) -> None:
        self.repository = repository
        # Only for a knowledge base that switched web search on (`retrieval.factory`).
        self.web_search = web_search
        self.dictionary = dictionary  # the knowledge base's domain terms, for the sparse channel
        self.embedder = embedder
        self.store = store
        self.rewriter = rewriter
        self.reranker = reranker
        self.hyde_model = hyde_model
        # Caching needs both: the store, and the epoch that makes its keys current.
        self.cache = cache if epochs is not None else None
        self.epochs = epochs
        self.executor = executor or channel_pool()
        self.parent_budget_tokens = parent_budget_tokens

    # --- entry point ------------------------------------------------------------------------

    def retrieve(
        self, request: RetrievalRequest, *, cancel: threading.Event | None = None
    ) -> RetrievalResponse:
        run = _Run()
        started = time.perf_counter()
        scope = self._scope(request)
        if request.item_ids:
            scope = self._about_items(request, scope, run)
        run.timed("facts", started)
        if not scope.ready_count:
            # Nothing may answer: return at once, no model, no vector store, no cache.
            return self._response(request, scope, run, results=(), variants=(request.question,),
                                  epochs={}, document_filter="none", empty_reason=scope.empty_reason)
        self._check(cancel)

        epochs: dict[int, int] = {}
        key = None
        # A chosen version (a draft under evaluation) never shares the active version's cache.
        # A question that also searches the web is answered fresh: its pages belong to it alone.
        cached_kb_only = not self._searches_web(request)
        if request.use_cache and not cached_kb_only:
            run.notes.append("web_search_uncached")
        if request.use_cache and request.version_id is None and self.cache is not None and cached_kb_only:
            started = time.perf_counter()
            from_l1 = True
            for kb_id in scope.kb_ids:
                epochs[kb_id], hit = self.epochs(kb_id)
                from_l1 = from_l1 and hit
            run.events.append(CacheEvent("epoch", from_l1, "l1" if from_l1 else "l3"))
            key = self._candidates_key(request, scope, epochs)
            cached = self.cache.get(key)
            run.events.append(CacheEvent("doc_retrieval", cached is not None, "doc"))
            run.timed("cache_lookup", started)
            if cached is not None:
                answering = self._still_ready(request, scope, (item["document_id"] for item in cached["results"]))
                results = tuple(
                    RetrievalResult.from_dict(item) for item in cached["results"]
                    if item["document_id"] in answering
                )
                return self._response(request, scope, run, results=results,
                                      variants=tuple(cached["variants"]), epochs=epochs,
                                      document_filter=cached["document_filter"])

        labelled = self._variants(request, run)
        variants = [text for _, text in labelled]
        self._check(cancel)

        documents, filter_kind = scope.document_filters()
        web_search = self._start_web_search(request, run)
        lists = self._recall(request, labelled, documents, run, cancel)
        answering = self._still_ready(request, scope, (hit.document_id for hits in lists.values() for hit in hits))
        lists = {
            name: [hit for hit in hits if hit.document_id in answering]
            for name, hits in lists.items()
        }
        if request.item_ids:
            lists = self._drop_other_items(request, lists, run)
        self._check(cancel)
        # After the READY re-filter, which web pages (no document) would not pass.
        web = self._web_candidates(web_search, run, cancel)
        if web.pages:
            lists[WEB_CHANNEL] = web.ranked()

        started = time.perf_counter()
        fused = self._fuse(request, lists, run)
        run.counts["fused"] = len(fused)
        rows = self.repository.load_chunks(hit.id for hit in fused if not is_web_id(hit.id))
        rows.update(web.rows())
        # A vector without its row is stale (document re-indexed or purged meanwhile).
        fused = [hit for hit in fused if hit.id in rows]
        run.timed("fusion", started)

        ranked = self._rerank(request, fused, rows, run)
        self._check(cancel)
        ranked = self._cut(request, ranked, run)

        results = web.marked(self._build_results(request, ranked, rows, run))
        response = self._response(request, scope, run, results=results, variants=tuple(variants),
                                  epochs=epochs, document_filter=filter_kind)
        if key is not None and not run.degradations and not any(r.from_web for r in results):
            # A degraded result (a channel or the reranker down) must not be served as the
            # healthy one for the next 10 minutes.
            self.cache.set(
                key,
                {
                    "results": [r.as_dict() for r in results],
                    "variants": list(variants),
                    "document_filter": filter_kind,
                },
                ttl=self.cache.candidates_ttl,
            )
        return response

    def _scope(self, request: RetrievalRequest) -> _Scope:
        # Narrowing to items starts from the listed READY documents (`_about_items`).
        with_ids = bool(request.item_ids)
        if len(request.kb_ids) == 1:
            facts = self.repository.ready_facts(
                kb_id=request.kb_id, document_ids=request.document_ids, version_id=request.version_id,
                filters=request.filters, with_ids=with_ids,
            )
            return _Scope(kb_ids=request.kb_ids, facts={request.kb_id: facts})
        return _Scope(
            kb_ids=request.kb_ids,
            facts=self.repository.ready_facts_many(kb_ids=request.kb_ids, document_ids=request.document_ids,
                                                   filters=request.filters, with_ids=with_ids),
        )

    def _still_ready(self, request: RetrievalRequest, scope: _Scope, document_ids: Iterable[int]) -> frozenset[int]:
        """Which candidates' documents may answer. Against the listed READY documents where a
        base listed them; otherwise asked of the repository, one query for all candidates, so a
        document the facts only counted (or one published, withdrawn or re-filtered meanwhile)
        answers only if it may now."""
        candidates = set(document_ids)
        listed = [facts.ready_ids for facts in scope.facts.values() if facts.ready_ids is not None]
        known = frozenset(doc for doc in candidates if any(doc in ids for ids in listed))
        counted = [kb_id for kb_id in scope.kb_ids
                   if scope.facts[kb_id].ready_ids is None and scope.facts[kb_id].ready_count]
        unknown = candidates - known
        if request.document_ids is not None:
            unknown &= set(request.document_ids)
        if not counted or not unknown:
            return known
        return known | self.repository.confirm_ready(
            kb_ids=counted, document_ids=unknown, version_id=request.version_id, filters=request.filters)

    def _about_items(self, request: RetrievalRequest, scope: _Scope, run: _Run) -> _Scope:
        """The scope without the documents that are only about other items than the confirmed
        ones, so the vector store is not asked for them at all. The facts were read with their
        READY documents listed (`_scope`)."""
        ready = scope.ready_ids or frozenset()
        excluded = self.repository.documents_about_other_items(document_ids=ready, item_ids=request.item_ids)
        run.counts["item_excluded_documents"] = len(excluded)
        run.notes.append("items:" + ",".join(str(i) for i in request.item_ids))
        if not excluded:
            return scope
        narrowed: dict[int, ReadyFacts] = {}
        for kb_id, facts in scope.facts.items():
            kept = (facts.ready_ids or frozenset()) - excluded
            narrowed[kb_id] = replace(
                facts, ready_count=len(kept), ready_ids=kept, other_ids=None,
                other_count=facts.other_count + facts.ready_count - len(kept),
            )
        return _Scope(kb_ids=scope.kb_ids, facts=narrowed)

    def _drop_other_items(self, request: RetrievalRequest, lists: dict[str, list[RankedHit]],
                          run: _Run) -> dict[str, list[RankedHit]]:
        """Chunks of shared documents (a manual of the whole range) that name only other items."""
        other = self.repository.chunks_about_other_items(
            chunk_ids={hit.id for hits in lists.values() for hit in hits}, item_ids=request.item_ids)
        run.counts["item_excluded_chunks"] = len(other)
        if not other:
            return lists
        return {name: [hit for hit in hits if hit.id not in other] for name, hits in lists.items()}

    # --- stages ---------------------------------------------------------------------------------

    def _candidates_key(self, request: RetrievalRequest, scope: _Scope, epochs: dict[int, int]) -> str:
        facts = scope.primary
        return l2.candidates_key(
            kb=request.kb_id,
            version=facts.version,
            epoch=epochs[request.kb_id],
            scope=facts.visibility_scope,
            # Each further knowledge base's own version, epoch and audience: publishing or
            # editing any one of them makes the combined entry unreachable.
            also=[
                [kb_id, scope.facts[kb_id].version, epochs[kb_id], scope.facts[kb_id].visibility_scope]
                for kb_id in scope.kb_ids[1:]
            ],
            documents=sorted(request.document_ids) if request.document_ids is not None else None,
            # Only when given, so the keys of unfiltered requests stay what they were.
            **({"filters": [f.as_dict() for f in request.filters]} if request.filters else {}),
            question=request.question if not request.context_variants else [request.question, *request.context_variants],
            top_k=request.top_k,
            candidate_k=request.candidate_k,
            mode=request.mode,
            rewrite=self.rewriter.name if request.enable_query_rewrite else None,
            rerank=self.reranker.name if request.enable_rerank and self.reranker is not None else None,
            hyde=getattr(self.hyde_model, "name", None) if request.enable_hyde else None,
            parents=self.parent_budget_tokens if request.enable_parent_expansion else None,
            dynamic=request.dynamic_top_k,
            items=sorted(request.item_ids) or None,
            fusion=[self._fusion(request), self._dense_weight()],
            embedding=[self.embedder.model, self.embedder.dimension],
            dictionary=list(self.dictionary),
        )

    def _fusion(self, request: RetrievalRequest) -> str:
        return request.fusion or getattr(settings, "RAG_FUSION", "convex")

    def _searches_web(self, request: RetrievalRequest) -> bool:
        return request.enable_web_search and self.web_search is not None

    def _start_web_search(self, request: RetrievalRequest, run: _Run) -> PendingWebSearch | None:
        if not request.enable_web_search:
            return None
        if self.web_search is None:
            run.notes.append("web_search_unavailable")
            return None
        return PendingWebSearch(search=self.web_search, query=request.question, executor=self.executor)

    def _web_candidates(self, pending: PendingWebSearch | None, run: _Run, cancel) -> WebCandidates:
        if pending is None:
            return NO_WEB
        outcome = pending.outcome(cancel=cancel)
        run.timings.append(StageTiming(f"channel:{WEB_CHANNEL}", outcome.elapsed_ms))
        if outcome.error is not None:
            run.errors.append(ChannelError(WEB_CHANNEL, outcome.error.code, _("网络搜索失败，已只使用知识库的结果。")))
            run.degradations.append("web_search_failed")
        run.counts[WEB_CHANNEL] = len(outcome.candidates.pages)
        return outcome.candidates

    def _dense_weight(self) -> float:
        if self.embedder.semantic:
            return float(getattr(settings, "RAG_FUSION_DENSE_WEIGHT", DEFAULT_DENSE_WEIGHT))
        return float(getattr(settings, "RAG_FUSION_LEXICAL_DENSE_WEIGHT", 0.0))

    def _fuse(self, request: RetrievalRequest, lists: dict[str, list[RankedHit]], run: _Run) -> list[FusedHit]:
        if sum(1 for hits in lists.values() if hits) <= 1:
            run.fusion = "none"  # one list: its raw scores are kept
            return reciprocal_rank_fusion(lists, limit=request.candidate_k)
        if self._fusion(request) == "rrf":
            run.fusion = f"rrf(k={RRF_K})"
            return reciprocal_rank_fusion(lists, limit=request.candidate_k)
        weight = self._dense_weight()
        run.fusion = f"convex(minmax, dense={weight:g})"
        return convex_fusion(lists, dense_weight=weight, limit=request.candidate_k)

    def _variants(self, request: RetrievalRequest, run: _Run) -> list[tuple[str, str]]:
        """(channel label, query text): the question, the conversation's readings of it, its
        Chinese words when it is asked in English, the rewrite."""
        given = _context_variants(request)
        variants = [("original", request.question), *((f"context{i + 1 if i else ''}", v) for i, v in enumerate(given))]
        if is_foreign(request.question) and request.mode in ("sparse", "hybrid"):
            # Dense vectors meet across languages but BM25 cannot: "management address" finds
            # "管理地址" only through the Chinese words it may be written as (searched by keywords
            # only: a vector of a word list would sit nowhere near the chunks).
            chinese = search_words(request.question)
            if chinese:
                variants.append(("chinese", chinese))
        if not request.enable_query_rewrite:
            return variants
        started = time.perf_counter()
        try:
            rewritten = self.rewriter.rewrite(request.question)
        except ProviderError as exc:
            run.degradations.append("query_rewrite_failed")
            run.errors.append(ChannelError("rewrite", exc.code, _("查询改写失败，已使用原问题继续检索。")))
            rewritten = None
        if rewritten and _normalise(rewritten) != _normalise(request.question):
            variants.append(("rewrite", rewritten.strip()))
        run.timed("rewrite", started)
        return variants

    def _recall(self, request, variants, documents, run: _Run, cancel) -> dict[str, list[RankedHit]]:
        jobs: dict[str, Callable[[], list[RankedHit]]] = {}
        for label, variant in variants:
            if request.mode in ("dense", "hybrid") and label != "chinese":
                jobs[f"dense:{label}"] = self._dense_job(request, variant, documents, run)
            if request.mode in ("sparse", "hybrid"):
                jobs[f"sparse:{label}"] = self._sparse_job(request, variant, documents)
        if request.enable_hyde:
            if self.hyde_model is None:
                run.notes.append("hyde_unavailable")
            else:
                jobs["dense:hyde"] = self._hyde_job(request, documents, run)

        started = time.perf_counter()
        results, failures = run_channels(jobs, executor=self.executor, cancel=cancel)
        run.timed("recall", started)

        lists: dict[str, list[RankedHit]] = {}
        for name in jobs:
            if name in failures:
                exc = failures[name]
                run.errors.append(ChannelError(name, getattr(exc, "code", "error"), _channel_message(name)))
                if name == "dense:hyde":
                    run.degradations.append("hyde_failed")
                    if run.hyde is not None and run.hyde.status != "failed":
                        # Written, then its embedding or search failed: the channel still failed.
                        run.hyde = replace(run.hyde, status="failed", error=getattr(exc, "code", "error"))
                else:
                    run.degradations.append(f"{name.split(':')[0]}_failed:{name.split(':')[1]}")
                continue
            hits, elapsed = results[name]
            run.timings.append(StageTiming(f"channel:{name}", elapsed))
            run.counts[name] = len(hits)
            lists[name] = hits
        primary = [name for name in jobs if name != "dense:hyde"]
        if primary and not any(name in lists for name in primary):
            raise AllChannelsFailed(
                _("所有检索通道都失败了，请稍后重试。"), details=tuple(run.errors)
            )
        return lists

    def _dense_job(self, request, text: str, documents: _Filters, run: _Run):
        def job() -> list[RankedHit]:
            vector = self._query_vector(text, run, use_cache=request.use_cache)
            hits = self.store.search_dense(
                kb_id=documents.first.kb_id, vector=vector, limit=request.candidate_k,
                documents=documents.first.documents, also=documents.also,
            )
            return [RankedHit(h.id, h.document_id, h.score) for h in hits]

        return job

    def _sparse_job(self, request, text: str, documents: _Filters):
        def job() -> list[RankedHit]:
            hits = self.store.search_sparse(
                kb_id=documents.first.kb_id, query=text, limit=request.candidate_k,
                documents=documents.first.documents, dictionary=self.dictionary, also=documents.also,
            )
            return [RankedHit(h.id, h.document_id, h.score) for h in hits]

        return job

    def _hyde_job(self, request, documents: _Filters, run: _Run):
        model_name = getattr(self.hyde_model, "name", "")

        def job() -> list[RankedHit]:
            started = time.perf_counter()
            try:
                hypothetical = self.hyde_model.complete(
                    [ChatMessage("user", HYDE_PROMPT.format(question=request.question))],
                    max_tokens=200, temperature=0.3,
                ).strip()
            except ProviderError as exc:
                # Recorded here, where the model call's own time is known; the channel's
                # failure (degradation, channel error) is handled with the others in _recall.
                run.hyde = HydeTrace(status="failed", model=model_name, elapsed_ms=_ms_since(started),
                                     error=exc.code)
                raise
            elapsed = _ms_since(started)
            if not hypothetical:
                run.hyde = HydeTrace(status="empty", model=model_name, elapsed_ms=elapsed)
                return []
            run.hyde = HydeTrace(status="ran", model=model_name, elapsed_ms=elapsed,
                                 hypothesis_chars=len(hypothetical))
            # Not through the query-embedding cache: a sampled guess is rarely asked twice.
            vector = self._query_vector(hyde_text(request.question, hypothetical), run, use_cache=False)
            hits = self.store.search_dense(
                kb_id=documents.first.kb_id, vector=vector, limit=request.candidate_k,
                documents=documents.first.documents, also=documents.also,
            )
            return [RankedHit(h.id, h.document_id, h.score) for h in hits]

        return job

    def _query_vector(self, text: str, run: _Run, *, use_cache: bool) -> list[float]:
        return query_vector(embedder=self.embedder, cache=self.cache, text=text, events=run.events,
                            use_cache=use_cache)

    def _rerank(self, request, fused: list[FusedHit], rows: dict[int, ChunkRow], run: _Run):
        """(hit, fusion score, rerank score | None) in final order."""
        ranked = [(hit, hit.score, None) for hit in fused]
        if not request.enable_rerank or not fused:
            return ranked
        if self.reranker is None:
            # The deployment has no reranker that helps (the local provider): fusion order.
            run.notes.append("rerank_unavailable")
            return ranked
        started = time.perf_counter()
        try:
            scores = self.reranker.rerank(
                request.question, [rows[hit.id].content for hit in fused], top_n=len(fused)
            )
        except ProviderError as exc:
            run.degradations.append("rerank_failed")
            run.errors.append(ChannelError("rerank", exc.code, _("重排失败，已保留融合排序。")))
            run.timed("rerank", started)
            return ranked
        if not _valid_rerank(scores, len(fused)):
            run.degradations.append("rerank_failed")
            run.errors.append(ChannelError("rerank", "provider_bad_response", _("重排结果无效，已保留融合排序。")))
            run.timed("rerank", started)
            return ranked
        reordered = [(fused[s.index], fused[s.index].score, s.score) for s in scores]
        seen = {s.index for s in scores}
        # Candidates the reranker did not score (budget prefix) keep their fusion order after.
        reordered += [(hit, hit.score, None) for i, hit in enumerate(fused) if i not in seen]
        run.counts["reranked"] = len(scores)
        run.timed("rerank", started)
        return reordered

    def _cut(self, request, ranked, run: _Run):
        reranked = request.enable_rerank and self.reranker is not None
        if request.dynamic_top_k and not reranked:
            # Cliffs are only meaningful on comparable rerank scores: fused scores are rank-based.
            run.notes.append("dynamic_top_k_needs_rerank")
        scores = [r for _, _, r in ranked if r is not None]
        if request.dynamic_top_k and reranked and scores:
            # The cut decides the count, up to MAX_KEPT, instead of top_k. Without scores (the
            # rerank failed) the fixed top_k applies to the fusion order.
            cliff = find_cliff(scores, max_k=MAX_KEPT)
            run.dynamic_top_k = DynamicTopKTrace(
                kept=cliff.kept, max_k=MAX_KEPT, scored=len(scores), cut_index=cliff.index,
                score_before=None if cliff.before is None else round(cliff.before, 6),
                score_after=None if cliff.after is None else round(cliff.after, 6),
                cliff=cliff.kind or "",
            )
            if cliff.index is not None:
                run.notes.append(f"dynamic_top_k:{cliff.kept}")
            return ranked[: cliff.kept]
        return ranked[: request.top_k]

    def _build_results(self, request, ranked, rows: dict[int, ChunkRow], run: _Run) -> tuple[RetrievalResult, ...]:
        hits = [rows[hit.id] for hit, _, _ in ranked]
        expansions = {}
        # A web page has no neighbours: only chunks are expanded.
        chunks = [row for row in hits if not is_web_id(row.id)]
        if request.enable_parent_expansion and chunks:
            started = time.perf_counter()
            try:
                neighbours = self.repository.load_neighbours(neighbour_positions(chunks))
                expansions = {
                    row.id: expand(row, neighbours, budget_tokens=self.parent_budget_tokens)
                    for row in chunks
                }
            except FactsUnavailable:
                # A failed expansion keeps the matched child: the answer loses context, not evidence.
                run.degradations.append("parent_expansion_failed")
                run.errors.append(ChannelError("parent_expansion", "facts_unavailable", _("上下文扩展失败，已使用命中块。")))
                expansions = {}
            run.timed("parent_expansion", started)

        started = time.perf_counter()
        asset_ids = set()
        for row in hits:
            expansion = expansions.get(row.id)
            asset_ids.update(expansion.asset_ids if expansion else row.asset_ids)
        assets = self.repository.load_assets(asset_ids)
        run.timed("assets", started)

        calibration = self.embedder.similarity_range
        results = []
        for (hit, fusion_score, rerank_score), row in zip(ranked, hits):
            expansion = expansions.get(row.id)
            ids = expansion.asset_ids if expansion else row.asset_ids
            results.append(
                RetrievalResult(
                    chunk_id=row.id,
                    document_id=row.document_id,
                    document_title=row.document_title,
                    matched_content=row.content,
                    content=expansion.content if expansion else row.content,
                    context_chunk_ids=expansion.context_chunk_ids if expansion else (row.id,),
                    score=round(rerank_score if rerank_score is not None else fusion_score, 6),
                    rank_sources=hit.sources,
                    content_type=row.content_type,
                    content_types=expansion.content_types if expansion else (row.content_type,),
                    assets=tuple(assets[a] for a in ids if a in assets),
                    locator=row.locator,
                    heading_path=row.heading_path,
                    parent_id=row.parent_id,
                    fusion_score=round(fusion_score, 6),
                    rerank_score=None if rerank_score is None else round(rerank_score, 6),
                    preview_url=row.preview_url,
                    kb_id=row.kb_id or request.kb_id,
                    relevance=relevance(
                        mode=request.mode,
                        lexical=lexical_relevance(
                            request.question, "\n".join((row.document_title, *row.heading_path, row.content))
                        ),
                        semantic=semantic_relevance(hit.dense_score, calibration),
                    ),
                    semantic_relevance=(
                        None if request.mode == "sparse" or semantic_relevance(hit.dense_score, calibration) is None
                        else round(semantic_relevance(hit.dense_score, calibration), 4)
                    ),
                )
            )
        return tuple(results)

    def _response(self, request, scope: _Scope, run: _Run, *, results, variants, epochs: dict[int, int],
                  document_filter: str, empty_reason: str = "") -> RetrievalResponse:
        hits = sum(1 for e in run.events if e.hit)
        trace = RetrievalTrace(
            kb_id=request.kb_id,
            version=scope.primary.version,
            cache_epoch=epochs.get(request.kb_id),
            mode=request.mode,
            query_variants=tuple(variants),
            ready_document_count=scope.ready_count,
            document_filter=document_filter,
            candidate_counts=dict(run.counts),
            stage_timings=tuple(run.timings),
            channel_errors=tuple(run.errors),
            degradations=tuple(run.degradations),
            cache=CacheSummary(
                enabled=request.use_cache and self.cache is not None,
                hit_count=hits,
                miss_count=len(run.events) - hits,
                events=tuple(run.events),
            ),
            empty_reason=empty_reason,
            total_ms=run.elapsed_ms(),
            notes=tuple(run.notes),
            embedding_model=self.embedder.model,
            fusion=run.fusion,
            knowledge_bases=scope.traces(epochs) if len(scope.kb_ids) > 1 else (),
            filters=request.filters,
            filter_admitted_count=scope.ready_count if request.filters else 0,
            filter_ready_count=scope.before_filters,
            hyde=run.hyde,
            dynamic_top_k=run.dynamic_top_k,
        )
        return RetrievalResponse(results=tuple(results), trace=trace)

    @staticmethod
    def _check(cancel: threading.Event | None) -> None:
        if cancel is not None and cancel.is_set():
            raise RetrievalCancelled("retrieval cancelled by the caller")


def _normalise(text: str) -> str:
    return "".join(text.split()).lower()


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


def _valid_rerank(scores, count: int) -> bool:
    indexes = [s.index for s in scores]
    return bool(scores) and all(0 <= i < count for i in indexes) and len(set(indexes)) == len(indexes)


def _channel_message(name: str) -> str:
    if name == "dense:hyde":
        return _("假设答案生成或检索失败，已使用问题本身的检索结果。")
    kind = name.split(":")[0]
    return {
        "dense": _("向量检索通道失败，已使用其他通道的结果。"),
        "sparse": _("关键词检索通道失败，已使用其他通道的结果。"),
    }.get(kind, _("检索通道失败。"))

