"""A knowledge base's vector store: its embedding space, text analysis and dictionary."""

from __future__ import annotations

from engines.ports import VectorStore
from engines.providers import get_vector_store

from knowledge.models import KnowledgeBase


def store_for(kb: KnowledgeBase) -> VectorStore:
    return get_vector_store(
        embedding_model=kb.embedding_model, dimension=kb.embedding_dimension, analysis=kb.text_analysis
    )

