"""Small ports between the pipelines and whatever serves models and vectors.

Adapters live in `engines/providers/` (models), `engines/milvus_store.py` (vectors) and
`engines/websearch/` (web search); which ones run is chosen in settings (`RAG_PROVIDER`,
`MILVUS_URI`, `RAG_WEB_SEARCH_BACKEND`). Ports are synchronous: the
retrieval service runs independent calls concurrently on a bounded thread pool. One is not: a
remote chat model's answer can also stream on the event loop (`AsyncChatStream`), where a
waiting answer costs no thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

# --- errors -------------------------------------------------------------------------------------


class ProviderError(Exception):
    """A model provider call failed. Messages never contain keys or raw provider bodies."""

    code = "provider_error"


class ProviderTimeout(ProviderError):
    code = "provider_timeout"


class ProviderRateLimited(ProviderError):
    code = "provider_rate_limited"


class ProviderUnavailable(ProviderError):
    """Connection refused, 5xx after retries, or the provider is not configured/available."""

    code = "provider_unavailable"


class ProviderBadResponse(ProviderError):
    """The provider answered, but the answer breaks its contract (shape, indexes, sizes)."""

    code = "provider_bad_response"


class ProviderInputTooLarge(ProviderError):
    """The request would exceed the provider's documented limits; nothing was sent."""

    code = "provider_input_too_large"


class UnembeddableText(ProviderError):
    """The embedder cannot process these texts (`indexes` into the call's texts) and refuses
    them from now on, e.g. a local engine died on them. Not transient: the same text fails
    again; the other texts of the call are fine and may be sent again without them."""

    code = "text_unembeddable"

    def __init__(self, message: str, *, indexes: Sequence[int]) -> None:
        super().__init__(message)
        self.indexes = tuple(indexes)


class WebSearchError(ProviderError):
    """A web search failed. Messages never contain keys, response bodies or the question: the
    trace records the code, and retrieval carries on with the knowledge base's own results."""

    code = "web_search_error"


class WebSearchTimeout(WebSearchError):
    code = "web_search_timeout"


class WebSearchUnavailable(WebSearchError):
    """Connection refused, an HTTP or protocol error, credentials rejected, or the search tool
    reported that it could not search."""

    code = "web_search_unavailable"


class WebSearchBadResponse(WebSearchError):
    """The server answered, but not with search results in a shape we read."""

    code = "web_search_bad_response"


class VectorStoreError(Exception):
    code = "vector_store_error"


class VectorStoreUnavailable(VectorStoreError):
    code = "vector_store_unavailable"


class IncompatibleCollection(VectorStoreError):
    """An existing collection was built with another schema, model or dimension."""

    code = "incompatible_collection"


# --- models -------------------------------------------------------------------------------------


@runtime_checkable
class Embedder(Protocol):
    model: str
    dimension: int
    # False for the lexical hashing embedder: its dense channel repeats what BM25 finds, so
    # hybrid fusion gives it no weight (RAG_FUSION_LEXICAL_DENSE_WEIGHT), and its cosine says
    # nothing about meaning.
    semantic: bool
    # (low, high): cosines mapped to a relevance of 0 and 1 (`retrieval.relevance`); None when
    # the model is not calibrated.
    similarity_range: tuple[float, float] | None
    # True when one call already spreads over every core of this machine (a local neural
    # model): more ingestion processes would only fight over the cores.
    uses_all_cores: bool

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector per text, in order."""

    def embed_query(self, text: str) -> list[float]: ...


@runtime_checkable
class QueryRewriter(Protocol):
    name: str

    def rewrite(self, question: str) -> str | None:
        """At most one alternative phrasing, or None when there is nothing better to add."""


@dataclass(frozen=True)
class RerankScore:
    index: int  # index into the documents passed in
    score: float


@runtime_checkable
class Reranker(Protocol):
    name: str

    def rerank(self, query: str, documents: Sequence[str], *, top_n: int) -> list[RerankScore]:
        """Scores for the best `top_n` documents, best first; indexes valid and unique."""


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["system", "user", "assistant"]
    content: str


@runtime_checkable
class ChatModel(Protocol):
    name: str
    # False for a model that can only quote a knowledge context (the local extractive one): it
    # cannot rewrite a follow-up or write a hypothetical answer, so callers do not ask it to.
    generative: bool

    def stream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024, temperature: float = 0.2
    ) -> Iterator[str]:
        """Text deltas as they arrive. Closing the iterator cancels the underlying call."""

    def complete(
        self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024, temperature: float = 0.2
    ) -> str: ...


@runtime_checkable
class AsyncChatStream(Protocol):
    """A chat model whose answer streams without a thread: a remote model, whose seconds of
    generation are spent waiting on the network. (The local extractive model computes its answer
    and has no such method: it runs in a worker thread like the other CPU-bound stages.)"""

    def astream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024, temperature: float = 0.2
    ) -> AsyncIterator[str]:
        """`stream`'s deltas, on the running event loop. Closing the iterator (`aclose`), or
        cancelling the task iterating it, cancels the underlying call."""


@runtime_checkable
class Captioner(Protocol):
    name: str

    def caption(self, *, image_jpeg: bytes, context: str, ocr_text: str = "") -> str:
        """A short Chinese description of the image for retrieval and citations."""


# --- web search ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class WebResult:
    """One page a web search found: what a web citation shows. `url` is http(s) only; the page
    itself is never fetched, by the server or by the reader's browser, until a reader clicks."""

    title: str
    url: str
    site: str  # the host name, or the site name the search service gives
    snippet: str  # the search service's excerpt: the only text of the page an answer may use
    rank: int  # 1-based, in the service's order


@runtime_checkable
class WebSearch(Protocol):
    name: str
    # The most one search may take (seconds) before it fails as `web_search_timeout`.
    timeout: float

    def search(self, query: str) -> list[WebResult]:
        """At most the configured number of results, best first; raises `WebSearchError`."""


# --- cache --------------------------------------------------------------------------------------


@runtime_checkable
class RetrievalCache(Protocol):
    """L2: query embeddings and retrieval candidates under keys built by `retrieval.cache`."""

    embedding_ttl: int
    candidates_ttl: int

    def get(self, key: str) -> Any | None: ...

    def set(self, key: str, value: Any, *, ttl: int) -> None: ...


# --- vectors ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkRecord:
    chunk_id: int
    kb_id: int
    document_id: int
    content: str
    content_type: str
    vector: Sequence[float]


@dataclass(frozen=True)
class FaqRecord:
    """One searchable question of a FAQ (the standard one or a similar one)."""

    record_id: int
    kb_id: int
    faq_id: int
    question: str
    vector: Sequence[float]


@dataclass(frozen=True)
class DocumentFilter:
    """Which documents a search may return, pushed down to the vector store.

    Exactly one of `include` / `exclude` is set: the shorter expression of the same set.
    """

    include: tuple[int, ...] | None = None
    exclude: tuple[int, ...] | None = None


@dataclass(frozen=True)
class KbDocuments:
    """Another knowledge base one search also covers, with its own document filter: a question
    over several knowledge bases of one embedding space is one search, not one per base, so its
    candidates compete on the same scores."""

    kb_id: int
    documents: DocumentFilter


@dataclass(frozen=True)
class VectorHit:
    id: int  # chunk id (or FAQ record id)
    document_id: int  # document id (or FAQ id)
    score: float


@runtime_checkable
class VectorStore(Protocol):
    """`dictionary`: the knowledge base's domain terms, which the sparse channel keeps whole
    (`engines.analysis`); index and query must pass the same ones."""

    def upsert_chunks(self, records: Sequence[ChunkRecord], *, dictionary: Sequence[str] = ()) -> None: ...

    def delete_document(self, *, kb_id: int, document_id: int) -> None: ...

    def search_dense(
        self, *, kb_id: int, vector: Sequence[float], limit: int, documents: DocumentFilter,
        also: Sequence[KbDocuments] = (),
    ) -> list[VectorHit]: ...

    def search_sparse(
        self, *, kb_id: int, query: str, limit: int, documents: DocumentFilter,
        dictionary: Sequence[str] = (), also: Sequence[KbDocuments] = (),
    ) -> list[VectorHit]: ...

    def upsert_faqs(self, records: Sequence[FaqRecord], *, dictionary: Sequence[str] = ()) -> None: ...

    def delete_faqs(self, *, kb_id: int, faq_ids: Sequence[int]) -> None: ...

    # `also_kb_ids`: more knowledge bases searched with `kb_id` as one (see `KbDocuments`).
    def search_faq_dense(
        self, *, kb_id: int, vector: Sequence[float], limit: int, also_kb_ids: Sequence[int] = ()
    ) -> list[VectorHit]: ...

    def search_faq_sparse(
        self, *, kb_id: int, query: str, limit: int, dictionary: Sequence[str] = (),
        also_kb_ids: Sequence[int] = (),
    ) -> list[VectorHit]: ...

    # Upkeep: the consistency check, a dictionary change, a deleted knowledge base, start-up.
    def chunk_ids(self, *, kb_id: int) -> dict[int, int]:
        """Chunk id → document id of every chunk the store holds for the knowledge base."""

    def delete_chunks(self, *, kb_id: int, chunk_ids: Sequence[int]) -> None: ...

    def reanalyse_chunks(self, *, kb_id: int, contents: Mapping[int, str], dictionary: Sequence[str]) -> int:
        """Rewrite the sparse terms of these chunks (vectors kept); returns rows rewritten."""

    def delete_knowledge_base(self, *, kb_id: int) -> None: ...

    def ensure_collections(self) -> None:
        """Create what the store needs for this embedding space, if missing (idempotent)."""

    def ping(self) -> None:
        """Raise VectorStoreUnavailable when the store cannot be reached."""

    def close(self) -> None: ...
