"""In-memory ports with fault injection, for testing RetrievalService's semantics exactly."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from retrieval.contracts import AssetRef, FactsUnavailable
from engines.ports import (
    DocumentFilter,
    ProviderBadResponse,
    ProviderUnavailable,
    RerankScore,
    VectorHit,
    VectorStoreUnavailable,
)
from retrieval.repository import LISTED_READY, ChunkRow, ReadyFacts


def chunk(id: int, document_id: int, content: str, *, ordinal: int = 0, parent_id: str = "p", tokens: int = 100,
          heading_path=("章节",), locator=None, content_type="text", asset_ids=()) -> ChunkRow:
    return ChunkRow(
        id=id, document_id=document_id, document_title=f"文档{document_id}", ordinal=ordinal,
        parent_id=parent_id, heading_path=tuple(heading_path), locator=locator or {}, content_type=content_type,
        content=content, token_count=tokens, asset_ids=tuple(asset_ids),
    )


@dataclass
class FakeRepository:
    chunks: dict[int, ChunkRow]
    ready: set[int]
    other: set[int] = field(default_factory=set)
    version: int = 1
    assets: dict[int, AssetRef] = field(default_factory=dict)
    fail_facts: bool = False
    fail_neighbours: bool = False
    fail_confirm: bool = False  # the database lost after the facts were read
    # The documents any metadata filter admits (the SQL of it is DjangoRepository's, tested on
    # the database); None: every document.
    admitted_by_filters: set[int] | None = None
    calls: list[str] = field(default_factory=list)
    # Documents with vectors that the READY facts did not see (created after they were read).
    unseen: set[int] = field(default_factory=set)
    # READY documents listed whatever the other side (the repository's LISTED_READY).
    listed_ready: int = LISTED_READY

    def _ready(self, document_ids, filters):
        ready = set(self.ready) if document_ids is None else set(self.ready) & set(document_ids)
        if filters and self.admitted_by_filters is not None:
            ready &= self.admitted_by_filters
        return ready

    def ready_facts(self, *, kb_id, document_ids, version_id=None, filters=(), with_ids=False):
        self.calls.append("ready_facts")
        if self.fail_facts:
            raise FactsUnavailable("facts down")
        before = len(self._ready(document_ids, ())) if filters else None
        ready = self._ready(document_ids, filters)
        reason = "" if ready else ("no_document_matches_filters" if before else
                                   "document_ids_not_ready" if document_ids is not None else "no_ready_documents")
        # The documents the facts see; `unseen` ones have vectors but came after the facts.
        all_docs = ({c.document_id for c in self.chunks.values()} | self.ready | self.other) - self.unseen
        others = all_docs - ready
        if not ready:
            return ReadyFacts(self.version, 0, frozenset(), None, "internal", reason, 0, before)
        # The repository's policy: the shorter side listed, READY too when asked for.
        list_others = 0 < len(others) < len(ready)
        list_ready = with_ids or len(ready) <= self.listed_ready or (bool(others) and not list_others)
        return ReadyFacts(self.version, len(ready), frozenset(ready) if list_ready else None,
                          frozenset(others) if list_others else None, "internal", reason, len(others), before)

    def ready_facts_many(self, *, kb_ids, document_ids, filters=(), with_ids=False):
        return {kb_id: self.ready_facts(kb_id=kb_id, document_ids=document_ids, filters=filters, with_ids=with_ids)
                for kb_id in kb_ids}

    def confirm_ready(self, *, kb_ids, document_ids, version_id=None, filters=()):
        self.calls.append("confirm_ready")
        if self.fail_facts or self.fail_confirm:
            raise FactsUnavailable("facts down")
        return frozenset(set(document_ids) & self._ready(None, filters))

    def load_chunks(self, ids):
        self.calls.append("load_chunks")
        return {i: self.chunks[i] for i in ids if i in self.chunks}

    def load_neighbours(self, positions):
        self.calls.append("load_neighbours")
        if self.fail_neighbours:
            raise FactsUnavailable("facts down during expansion")
        by_position = {(c.document_id, c.ordinal): c for c in self.chunks.values()}
        return {p: by_position[p] for p in positions if p in by_position}

    def load_assets(self, ids):
        self.calls.append("load_assets")
        return {i: self.assets[i] for i in ids if i in self.assets}

    def documents_about_other_items(self, *, document_ids, item_ids):
        self.calls.append("documents_about_other_items")
        return frozenset()

    def chunks_about_other_items(self, *, chunk_ids, item_ids):
        self.calls.append("chunks_about_other_items")
        return frozenset()


def _tokens(text: str) -> set[str]:
    chars = [c for c in text if not c.isspace()]
    return {a + b for a, b in zip(chars, chars[1:])} | set(chars)


class FakeEmbedder:
    model = "fake-embedder"
    dimension = 64
    semantic = True
    similarity_range = None
    uses_all_cores = False

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.calls = 0

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimension
        for token in _tokens(text):
            vector[hash_stable(token) % self.dimension] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]

    def embed_query(self, text):
        self.calls += 1
        if self.fail:
            raise ProviderUnavailable("embedding service down")
        return self._vector(text)

    def embed_documents(self, texts):
        return [self._vector(t) for t in texts]


def hash_stable(token: str) -> int:
    value = 0
    for ch in token:
        value = (value * 131 + ord(ch)) % 1_000_003
    return value


class FakeStore:
    """Dense = cosine over FakeEmbedder vectors; sparse = character-bigram overlap."""

    def __init__(self, chunks: dict[int, ChunkRow], *, embedder: FakeEmbedder | None = None) -> None:
        self.chunks = chunks
        self.embedder = embedder or FakeEmbedder()
        self.fail_dense = False
        self.fail_sparse = False
        self.extra_hits: list[VectorHit] = []  # vectors that exist in the store but not as READY facts
        self.calls: list[tuple[str, DocumentFilter]] = []
        self.dictionaries: list[tuple[str, ...]] = []
        self.before_search: Callable[[str], None] | None = None
        self.lock = threading.Lock()

    def _allowed(self, document_id: int, documents: DocumentFilter) -> bool:
        if documents.include is not None:
            return document_id in documents.include
        return document_id not in (documents.exclude or ())

    def search_dense(self, *, kb_id, vector, limit, documents, also=()):
        with self.lock:
            self.calls.append(("dense", documents))
        if self.before_search:
            self.before_search("dense")
        if self.fail_dense:
            raise VectorStoreUnavailable("dense down")
        scored = []
        for c in self.chunks.values():
            if self._allowed(c.document_id, documents):
                v = self.embedder._vector(c.content)
                scored.append(VectorHit(c.id, c.document_id, sum(a * b for a, b in zip(vector, v))))
        scored += [h for h in self.extra_hits if self._allowed(h.document_id, documents)]
        return sorted(scored, key=lambda h: -h.score)[:limit]

    def search_sparse(self, *, kb_id, query, limit, documents, dictionary=(), also=()):
        with self.lock:
            self.calls.append(("sparse", documents))
            self.dictionaries.append(tuple(dictionary))
        if self.before_search:
            self.before_search("sparse")
        if self.fail_sparse:
            raise VectorStoreUnavailable("sparse down")
        q = _tokens(query)
        scored = []
        for c in self.chunks.values():
            overlap = len(q & _tokens(c.content))
            if overlap and self._allowed(c.document_id, documents):
                scored.append(VectorHit(c.id, c.document_id, float(overlap)))
        scored += [h for h in self.extra_hits if self._allowed(h.document_id, documents)]
        return sorted(scored, key=lambda h: -h.score)[:limit]


class FakeRewriter:
    name = "fake-rewriter"

    def __init__(self, rewrite: str | None = None, *, fail: bool = False) -> None:
        self.value, self.fail, self.calls = rewrite, fail, 0

    def rewrite(self, question):
        self.calls += 1
        if self.fail:
            raise ProviderUnavailable("rewrite down")
        return self.value


class FakeReranker:
    name = "fake-reranker"

    def __init__(self, *, order: Sequence[int] | None = None, fail: bool = False, bad: list[RerankScore] | None = None):
        self.order, self.fail, self.bad, self.calls = order, fail, bad, 0

    def rerank(self, query, documents, *, top_n):
        self.calls += 1
        if self.fail:
            raise ProviderBadResponse("rerank returned garbage")
        if self.bad is not None:
            return self.bad
        order = list(self.order) if self.order is not None else list(reversed(range(len(documents))))
        return [RerankScore(index, 1.0 - rank * 0.1) for rank, index in enumerate(order[:top_n])]
