"""Frozen contracts between retrieval and its callers (API, admin hit test, chat, evaluation).

Callers never receive QuerySets or model instances from retrieval: only these dataclasses, which
serialize to JSON with `as_dict()` and can be stored as evidence next to an answer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Mode = Literal["dense", "sparse", "hybrid"]
Fusion = Literal["convex", "rrf"]
FUSIONS = ("convex", "rrf")
MODES: tuple[str, ...] = ("dense", "sparse", "hybrid")

MAX_DOCUMENT_IDS = 50
MAX_TOP_K = 50
MAX_CANDIDATE_K = 200
MAX_QUESTION_CHARS = 2000
# `RetrievalTrace.empty_reason` when no base in the scope has a published version: the answer says
# the knowledge is not live yet rather than that the question has no answer.
NO_ACTIVE_VERSION = "no_active_version"
# `RetrievalTrace.empty_reason` when READY documents exist but the request's metadata filters
# admit none of them: an answer to the filter, not an error.
NO_DOCUMENT_MATCHES_FILTERS = "no_document_matches_filters"

# --- metadata filters ---------------------------------------------------------------------------
# A filter names a field of the document: one of BUILTIN_FILTER_FIELDS (columns of the document and
# its item tags), or a key of `Document.attributes` written "attributes.<key>". At the edges
# (`retrieval.filters.parse_filter`) a bare key that is no built-in reads as an attribute key, so
# {"field": "部门", …} and {"field": "attributes.部门", …} are one filter; the prefix is needed
# only for an attribute whose key is a built-in's name ("attributes.title").
FilterOp = Literal["eq", "in", "range"]
FILTER_OPS: tuple[str, ...] = ("eq", "in", "range")
BUILTIN_FILTER_FIELDS: tuple[str, ...] = ("title", "file_type", "source_tag", "created_at", "updated_at", "item")
DATE_FILTER_FIELDS: tuple[str, ...] = ("created_at", "updated_at")
ATTRIBUTE_FIELD_PREFIX = "attributes."
MAX_FILTERS = 10
MAX_FILTER_VALUES = 50  # the values of one "in"

FilterScalar = str | int | float | bool


@dataclass(frozen=True)
class MetadataFilter:
    """One condition on the documents that may answer, already validated (`retrieval.filters`).

    `field` is canonical: a built-in name or "attributes.<key>". `value` is the scalar of "eq" or
    the tuple of "in"; "range" has `gte` and / or `lte`, both numbers or both ISO dates
    ("2025-01-01"), inclusive."""

    field: str
    op: FilterOp
    value: FilterScalar | tuple[FilterScalar, ...] | None = None
    gte: str | int | float | None = None
    lte: str | int | float | None = None

    @property
    def attribute(self) -> str | None:
        """The `Document.attributes` key it reads; None for a built-in field."""
        return self.field.removeprefix(ATTRIBUTE_FIELD_PREFIX) if self.field.startswith(ATTRIBUTE_FIELD_PREFIX) else None

    def as_dict(self) -> dict[str, Any]:
        """The filter as the API takes it back (`{"field", "op", "value"}` or the bounds)."""
        data: dict[str, Any] = {"field": self.field, "op": self.op}
        if self.op == "range":
            data.update({bound: getattr(self, bound) for bound in ("gte", "lte") if getattr(self, bound) is not None})
        else:
            data["value"] = list(self.value) if isinstance(self.value, tuple) else self.value
        return data


@dataclass(frozen=True)
class RetrievalRequest:
    kb_id: int
    question: str
    top_k: int = 5
    mode: Mode = "hybrid"
    candidate_k: int = 30
    enable_query_rewrite: bool = False
    enable_rerank: bool = False
    enable_parent_expansion: bool = False
    enable_hyde: bool = False
    dynamic_top_k: bool = False
    document_ids: tuple[int, ...] | None = None
    # More wordings searched with the question and fused with it, as they are (a follow-up's
    # question together with the one before it); they never judge relevance, the question does.
    context_variants: tuple[str, ...] = ()
    use_cache: bool = True
    fusion: Fusion | None = None  # None: settings.RAG_FUSION
    # The version whose READY documents may answer: None is the active one (every reader). A
    # draft's id is for staff tools only (the release check evaluates a draft before it is
    # published); such a request never reads or writes the cache, which is keyed by the active
    # version's epoch.
    version_id: int | None = None
    # More knowledge bases searched with `kb_id` as one question: each through the READY
    # documents of its own active version, all candidates in one fused list. The caller checked
    # the requester's access to every one; `kb_id` stays the one whose settings apply.
    also_kb_ids: tuple[int, ...] = ()
    # Conditions on the documents' metadata, all of which a document must meet: resolved to
    # document ids over the READY facts (in each knowledge base of the scope) like `document_ids`,
    # pushed down to the vector store and checked again after recall.
    filters: tuple[MetadataFilter, ...] = ()
    # The items (products, models) the question was confirmed to be about: text about other
    # items only is left out — whole documents about them before the vector store is asked,
    # then chunks that name only them. Text about no item stays.
    item_ids: tuple[int, ...] = ()
    # Also search the web, when the service has a web search (its knowledge base switched it on
    # and the deployment configured one): web results join the candidates and are fused and
    # reranked with the knowledge base's, marked `source_kind="web"`. Such a request never reads
    # or writes the candidates cache: web results belong to this question alone.
    enable_web_search: bool = False

    def __post_init__(self) -> None:
        if self.also_kb_ids and self.version_id is not None:
            raise ValueError("a chosen version belongs to one knowledge base: no also_kb_ids with version_id")
        if len(self.filters) > MAX_FILTERS:
            raise ValueError(f"at most {MAX_FILTERS} metadata filters per request")

    @property
    def kb_ids(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys((self.kb_id, *self.also_kb_ids)))


@dataclass(frozen=True)
class AssetRef:
    id: int
    document_id: int
    page: int | None
    bbox: tuple[float, ...]
    width: int
    height: int
    caption: str
    url: str

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bbox": list(self.bbox)}


SourceKind = Literal["kb", "web"]


@dataclass(frozen=True)
class RetrievalResult:
    # The chunk that really matched: citations anchor here. A web result (`source_kind="web"`)
    # has no chunk: its chunk_id and document_id are negative (-1, -2, … in the search's order),
    # never a row's id.
    chunk_id: int
    document_id: int
    document_title: str
    matched_content: str  # the matched chunk's own text
    content: str  # what the answer step reads (expanded by Small2Big when enabled)
    context_chunk_ids: tuple[int, ...]
    score: float
    rank_sources: tuple[str, ...]  # e.g. ("dense:original", "sparse:rewrite")
    content_type: str
    content_types: tuple[str, ...]
    assets: tuple[AssetRef, ...]
    locator: dict[str, Any]
    heading_path: tuple[str, ...]
    parent_id: str
    fusion_score: float | None = None
    rerank_score: float | None = None
    # The chunk's PDF region as a PNG (`GET /api/chunks/{id}/preview`); None when there is none.
    preview_url: str | None = None
    # Comparable across queries and knowledge bases, in [0, 1] (`retrieval.relevance`).
    relevance: float = 0.0
    # The dense part of it alone (None without a calibrated embedder or a dense hit): whether the
    # chunk means what the question asks, whatever words either uses.
    semantic_relevance: float | None = None
    kb_id: int = 0  # the knowledge base the chunk belongs to (0 for a web result)
    # "web": a page a web search found, not the knowledge base's text; `url` and `site` say
    # where it is (`document_title` is the page's title, `content` the search's snippet).
    source_kind: SourceKind = "kb"
    url: str = ""
    site: str = ""

    @property
    def from_web(self) -> bool:
        return self.source_kind == "web"

    def as_dict(self) -> dict[str, Any]:
        # Written out rather than `asdict`, whose recursive deep copy was a tenth of a chat
        # turn's CPU (profiled under load): every answer's evidence writes several of these.
        return {
            "chunk_id": self.chunk_id,
            "document_id": self.document_id,
            "document_title": self.document_title,
            "matched_content": self.matched_content,
            "content": self.content,
            "context_chunk_ids": list(self.context_chunk_ids),
            "score": self.score,
            "rank_sources": list(self.rank_sources),
            "content_type": self.content_type,
            "content_types": list(self.content_types),
            "assets": [asset.as_dict() for asset in self.assets],
            "locator": dict(self.locator),
            "heading_path": list(self.heading_path),
            "parent_id": self.parent_id,
            "fusion_score": self.fusion_score,
            "rerank_score": self.rerank_score,
            "preview_url": self.preview_url,
            "relevance": self.relevance,
            "semantic_relevance": self.semantic_relevance,
            "kb_id": self.kb_id,
            "source_kind": self.source_kind,
            "url": self.url,
            "site": self.site,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RetrievalResult:
        return cls(
            **{
                **data,
                "context_chunk_ids": tuple(data["context_chunk_ids"]),
                "rank_sources": tuple(data["rank_sources"]),
                "content_types": tuple(data["content_types"]),
                "heading_path": tuple(data["heading_path"]),
                "assets": tuple(
                    AssetRef(**{**asset, "bbox": tuple(asset["bbox"])}) for asset in data["assets"]
                ),
            }
        )


@dataclass(frozen=True)
class StageTiming:
    stage: str
    elapsed_ms: float


@dataclass(frozen=True)
class ChannelError:
    channel: str  # e.g. "dense:original"
    error: str  # stable code, never a provider body
    message: str


@dataclass(frozen=True)
class CacheEvent:
    stage: str  # "epoch", "query_embedding", "doc_retrieval", "faq_retrieval"
    hit: bool
    source_type: str  # "l1", "l3", "doc", "faq", "embedding"


@dataclass(frozen=True)
class CacheSummary:
    enabled: bool
    hit_count: int
    miss_count: int
    events: tuple[CacheEvent, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "hit_count": self.hit_count,
            "miss_count": self.miss_count,
            "events": [asdict(event) for event in self.events],
        }


@dataclass(frozen=True)
class KbScopeTrace:
    """One knowledge base of a question over several: what it could answer from."""

    kb_id: int
    version: int | None
    cache_epoch: int | None
    ready_document_count: int
    empty_reason: str = ""


@dataclass(frozen=True)
class HydeTrace:
    """The HyDE channel of one retrieval: what the chat model wrote and how long it took. The
    text itself is not kept (it is the model's, not the knowledge base's), only its length;
    what was embedded is the question and that text together (`embedded`)."""

    status: Literal["ran", "empty", "failed"]
    model: str
    elapsed_ms: float  # the model's completion alone (the channel's timing adds embedding and search)
    hypothesis_chars: int = 0
    embedded: str = "question+hypothesis"
    error: str = ""  # the provider error's stable code when status is "failed"

    @property
    def ran(self) -> bool:
        return self.status == "ran"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ran": self.ran}


@dataclass(frozen=True)
class DynamicTopKTrace:
    """Dynamic top-k after rerank (`retrieval.dynamic_topk`): how many results were kept out of
    at most `max_k`, and where the scores fell off a cliff (`cut_index` is the first result
    dropped, 0-based; None when there was no cliff within `max_k`)."""

    kept: int
    max_k: int
    scored: int  # reranked candidates the cut looked at
    cut_index: int | None = None
    score_before: float | None = None
    score_after: float | None = None
    cliff: str = ""  # "relative" (> 25 % of the previous score), "absolute" (> 0.5) or ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RetrievalTrace:
    kb_id: int
    version: int | None
    cache_epoch: int | None
    mode: str
    query_variants: tuple[str, ...]
    ready_document_count: int
    document_filter: str  # "in", "not_in", "none" — which expression went to the vector store
    candidate_counts: dict[str, int]
    stage_timings: tuple[StageTiming, ...]
    channel_errors: tuple[ChannelError, ...]
    degradations: tuple[str, ...]  # e.g. "query_rewrite_failed", "rerank_failed", "dense_failed"
    cache: CacheSummary
    empty_reason: str = ""
    total_ms: float = 0.0
    notes: tuple[str, ...] = ()
    embedding_model: str = ""  # the knowledge base's embedding space
    fusion: str = ""  # how the channels' lists were merged, e.g. "rrf(k=60)"; "" when not fused
    # Every knowledge base of a question over several, `kb_id` first; () for one.
    knowledge_bases: tuple[KbScopeTrace, ...] = ()
    # The request's metadata filters, the READY documents they admitted (what was pushed down,
    # `ready_document_count`) and the READY documents there were before them.
    filters: tuple[MetadataFilter, ...] = ()
    filter_admitted_count: int = 0
    filter_ready_count: int = 0
    hyde: HydeTrace | None = None  # None: HyDE was not asked for, or could not be (see notes)
    dynamic_top_k: DynamicTopKTrace | None = None  # None: the fixed top_k applied

    def as_dict(self) -> dict[str, Any]:
        return {
            **({"knowledge_bases": [asdict(kb) for kb in self.knowledge_bases]} if self.knowledge_bases else {}),
            **({"filters": [f.as_dict() for f in self.filters], "filter_admitted_count": self.filter_admitted_count,
                "filter_ready_count": self.filter_ready_count} if self.filters else {}),
            "kb_id": self.kb_id,
            "embedding_model": self.embedding_model,
            "fusion": self.fusion,
            "version": self.version,
            "cache_epoch": self.cache_epoch,
            "mode": self.mode,
            "query_variants": list(self.query_variants),
            "ready_document_count": self.ready_document_count,
            "document_filter": self.document_filter,
            "candidate_counts": dict(self.candidate_counts),
            "stage_timings_ms": [asdict(t) for t in self.stage_timings],
            "channel_errors": [asdict(e) for e in self.channel_errors],
            "degradations": list(self.degradations),
            "cache": self.cache.as_dict(),
            "empty_reason": self.empty_reason,
            "total_ms": self.total_ms,
            "notes": list(self.notes),
            "hyde": self.hyde.as_dict() if self.hyde else None,
            "dynamic_top_k": self.dynamic_top_k.as_dict() if self.dynamic_top_k else None,
        }


@dataclass(frozen=True)
class RetrievalResponse:
    results: tuple[RetrievalResult, ...]
    trace: RetrievalTrace

    def as_dict(self) -> dict[str, Any]:
        return {"results": [r.as_dict() for r in self.results], "trace": self.trace.as_dict()}


@dataclass(frozen=True)
class FaqHit:
    faq_id: int
    question: str  # the standard question
    matched_question: str  # the phrasing that matched (standard or similar)
    answer: str
    score: float  # lexical similarity of the user question to `matched_question`, in [0, 1]
    rank_sources: tuple[str, ...] = field(default_factory=tuple)
    exact: bool = False  # equal to one of the FAQ's phrasings after normalisation
    source_tag: str = ""
    # Calibrated dense similarity of the question to the FAQ's nearest phrasing, in [0, 1]
    # (None without a calibrated embedder): paraphrases that share few words.
    semantic: float | None = None
    kb_id: int = 0  # the knowledge base the FAQ belongs to

    def as_dict(self) -> dict[str, Any]:
        return {
            "kb_id": self.kb_id,
            "faq_id": self.faq_id, "question": self.question, "matched_question": self.matched_question,
            "answer": self.answer, "score": self.score, "rank_sources": list(self.rank_sources),
            "exact": self.exact, "source_tag": self.source_tag, "semantic": self.semantic,
        }


# --- errors -------------------------------------------------------------------------------------


class RetrievalError(Exception):
    code = "retrieval_error"
    http_status = 500

    def __init__(self, message: str, *, details: tuple[ChannelError, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class FactsUnavailable(RetrievalError):
    """The relational facts store (which documents are READY) could not be read."""

    code = "facts_unavailable"
    http_status = 503


class RetrievalMisconfigured(RetrievalError):
    """The deployment cannot serve this knowledge base (e.g. its embedding model is not offered
    by the configured provider, or the vector store setting is invalid)."""

    code = "retrieval_misconfigured"
    http_status = 503


class AllChannelsFailed(RetrievalError):
    code = "retrieval_unavailable"
    http_status = 503


class RetrievalCancelled(Exception):
    """The caller went away. Not a degradation: it propagates, nothing is cached or traced."""
