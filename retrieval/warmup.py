"""Warm the web process in the background so the first question is not the slow one.

The first retrieval otherwise pays for loading jieba's dictionary (~0.7 s), the Qwen tokenizer
and Milvus collections (~0.2 s each), the first English question for CC-CEDICT's index (~1.5 s). Runs in a daemon thread: start-up is not delayed, and a
failure only means the first request warms things itself.
"""

from __future__ import annotations

import logging
import threading

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, close_old_connections

from engines import glossary, lexical
from engines.providers import get_vector_store
from engines.ports import VectorStoreError
from engines.providers import get_embedder
from engines.tokens import count_tokens
from knowledge.models import KnowledgeBase

logger = logging.getLogger(__name__)


def warm_up() -> None:
    count_tokens("预热")
    lexical.warm_up()  # jieba's IDF table, read by the relevance floor of every question
    glossary.warm_up()  # CC-CEDICT's English index (~1.5 s), read by every English question
    try:
        spaces = set(KnowledgeBase.objects.values_list("embedding_model", "embedding_dimension", "text_analysis"))
        for model, dimension, analysis in spaces:
            get_embedder(model, dimension).embed_query("预热")
            get_vector_store(embedding_model=model, dimension=dimension, analysis=analysis).ensure_collections()
    except (DatabaseError, VectorStoreError, ImproperlyConfigured) as exc:
        logger.warning("warm-up skipped: %s", exc)
    finally:
        close_old_connections()


def start_background_warm_up() -> None:
    threading.Thread(target=warm_up, name="retrieval-warm-up", daemon=True).start()
