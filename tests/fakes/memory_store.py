"""An in-memory vector store for tests that need retrieval's real factory path (database facts,
the local provider) but no Milvus: RAG_VECTOR_STORE names it (the `memory_store` fixture).

It holds the chunks `publish_chunks` gave it and matches them by shared character bigrams (the
sparse channel); it has no dense hits and no FAQs. Only the calling test's chunks are there:
the fixture empties it before and after.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import ClassVar

import pytest

from engines.ports import VectorHit
from knowledge.catalog import services as catalog_services
from knowledge.models import Chunk, KnowledgeBase, Visibility
from tests.conftest import make_document, make_kb, make_ready_version


class MemoryVectorStore:
    chunks: ClassVar[dict[int, tuple[int, int, str]]] = {}  # chunk id → (kb id, document id, text)

    def __init__(self, *, embedding_model: str, dimension: int, analysis: str) -> None:
        self.space = (embedding_model, dimension, analysis)

    @classmethod
    def index(cls, chunk: Chunk) -> None:
        cls.chunks[chunk.pk] = (chunk.knowledge_base_id, chunk.document_id, chunk.content)

    def search_sparse(self, *, kb_id, query, limit, documents, dictionary=(), also=()):
        wanted = _bigrams(query)
        kb_ids = {kb_id, *(scope.kb_id for scope in also)}
        hits = [
            VectorHit(chunk_id, document_id, float(len(wanted & _bigrams(text))))
            for chunk_id, (owner, document_id, text) in self.chunks.items()
            if owner in kb_ids and wanted & _bigrams(text)
        ]
        return sorted(hits, key=lambda hit: -hit.score)[:limit]

    def search_dense(self, *, kb_id, vector, limit, documents, also=()):
        return []

    def search_faq_dense(self, *, kb_id, vector, limit, also_kb_ids=()):
        return []

    def search_faq_sparse(self, *, kb_id, query, limit, dictionary=(), also_kb_ids=()):
        return []


def _bigrams(text: str) -> set[str]:
    chars = [c for c in text.lower() if not c.isspace()]
    return {a + b for a, b in zip(chars, chars[1:])}


@pytest.fixture
def memory_store(settings) -> Iterator[type[MemoryVectorStore]]:
    settings.RAG_VECTOR_STORE = "tests.fakes.memory_store.MemoryVectorStore"
    MemoryVectorStore.chunks = {}
    yield MemoryVectorStore
    MemoryVectorStore.chunks = {}


def publish_chunks(*, actor, texts: Sequence[str], web_search: bool = False, title: str = "产品手册") -> KnowledgeBase:
    """A public knowledge base whose active version is one ready document holding `texts` as its
    chunks (indexed in the memory store), with web search switched on or off."""
    kb = make_kb(visibility=Visibility.PUBLIC, actor=actor)
    document = make_document(kb, title=title)
    for ordinal, text in enumerate(texts):
        chunk = Chunk.objects.create(document=document, knowledge_base=kb, ordinal=ordinal, content=text,
                                     token_count=len(text), heading_path=[title])
        MemoryVectorStore.index(chunk)
    version = make_ready_version(kb, documents=[document])
    catalog_services.activate_version(version=version, actor=actor, reason="测试发布")
    if web_search:
        catalog_services.update_knowledge_base(kb=kb, actor=actor, web_search_enabled=True)
    kb.refresh_from_db()
    return kb
