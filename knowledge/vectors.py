"""A knowledge base's vector store: its embedding space, text analysis and dictionary."""

from __future__ import annotations

from engines.milvus_store import MilvusVectorStore, get_vector_store

from knowledge.models import KnowledgeBase


def store_for(kb: KnowledgeBase) -> MilvusVectorStore:
    return get_vector_store(
        embedding_model=kb.embedding_model, dimension=kb.embedding_dimension, analysis=kb.text_analysis
    )

