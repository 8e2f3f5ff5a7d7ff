"""L2 retrieval cache (Django cache: LocMem by default, Redis in production).

Holds query embeddings and retrieval candidates, never final answers. Candidate keys are bound to
everything that could change the result — knowledge base, active version, cache epoch, visibility
scope, document filter, metadata filters, question, top_k, candidate_k, mode, rewrite / rerank / expansion flags and
the model and chunk-schema versions — so a hit can only ever return what a miss would compute.
The epoch (L3 in the database, L1 in process, see `knowledge.epochs`) retires old keys wholesale.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache

from ragsite.errors import CACHE_ERRORS

logger = logging.getLogger(__name__)


# Bump when the cached shape or the chunking scheme changes: old entries become unreachable.
CHUNK_SCHEMA_VERSION = "chunks-v1"
CACHE_FORMAT_VERSION = 6  # 2: results carry preview_url; 3: relevance; 4: semantic relevance; 5: kb_id;
# 6: source_kind, url, site


def _digest(parts: dict[str, Any]) -> str:
    raw = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


def embedding_key(*, model: str, dimension: int, text: str) -> str:
    return "rag:emb:" + _digest({"m": model, "d": dimension, "t": text})


def candidates_key(**parts: Any) -> str:
    return "rag:cand:" + _digest({**parts, "schema": CHUNK_SCHEMA_VERSION, "fmt": CACHE_FORMAT_VERSION})


def faq_candidates_key(**parts: Any) -> str:
    return "rag:faq:" + _digest({**parts, "fmt": CACHE_FORMAT_VERSION})


class DjangoRetrievalCache:
    """The `RetrievalCache` port on Django's cache framework (LocMem, Redis, …)."""

    def __init__(self, *, embedding_ttl: int | None = None, candidates_ttl: int | None = None) -> None:
        self.embedding_ttl = embedding_ttl or int(getattr(settings, "RAG_CACHE_EMBEDDING_TTL_SECONDS", 24 * 3600))
        self.candidates_ttl = candidates_ttl or int(getattr(settings, "RAG_CACHE_CANDIDATES_TTL_SECONDS", 600))

    def get(self, key: str) -> Any | None:
        try:
            return cache.get(key)
        except CACHE_ERRORS as exc:
            # A cache outage degrades to recomputation; it must not fail the request.
            logger.warning("retrieval cache read failed: %s", exc)
            return None

    def set(self, key: str, value: Any, *, ttl: int) -> None:
        try:
            cache.set(key, value, ttl)
        except CACHE_ERRORS as exc:
            logger.warning("retrieval cache write failed: %s", exc)
