"""Cache generations (epochs) per knowledge base: L3 in the database, L1 in-process with a TTL.

L2 keys embed the epoch, so bumping it (activation, rollback, FAQ edits, manual invalidation)
retires every cached candidate of the knowledge base at once. L1 exists only so that a hot path
does not read the database for the epoch on every request; it is cleared after the commit that
bumps the epoch and otherwise expires quickly, which bounds staleness in other processes.
"""

from __future__ import annotations

import threading
import time

from django.conf import settings
from django.db import transaction
from django.db.models import F

from knowledge.models import CacheNamespace, KnowledgeBase


def scope_for_kb(kb_id: int) -> str:
    return f"kb:{kb_id}"


class EpochL1Cache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, int]] = {}

    def get(self, scope: str) -> int | None:
        with self._lock:
            entry = self._entries.get(scope)
            if entry is None:
                return None
            expires_at, epoch = entry
            if expires_at < time.monotonic():
                del self._entries[scope]
                return None
            return epoch

    def set(self, scope: str, epoch: int) -> None:
        ttl = float(getattr(settings, "RAG_EPOCH_L1_TTL_SECONDS", 5.0))
        with self._lock:
            self._entries[scope] = (time.monotonic() + ttl, epoch)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


l1_epochs = EpochL1Cache()


def current_epoch(*, kb_id: int) -> tuple[int, bool]:
    """(epoch, served_from_l1). A missing namespace reads as epoch 1 without writing it."""
    scope = scope_for_kb(kb_id)
    cached = l1_epochs.get(scope)
    if cached is not None:
        return cached, True
    epoch = (
        CacheNamespace.objects.filter(scope=scope).values_list("cache_epoch", flat=True).first()
        or 1
    )
    l1_epochs.set(scope, epoch)
    return epoch, False


def bump_epoch(*, kb_id: int) -> int:
    """Advance the knowledge base's epoch inside the caller's transaction; returns the new value.

    This process's L1 is cleared once the transaction commits (never before: a reader must not
    re-cache the old epoch from a row that is about to change). Other processes follow within
    the L1 TTL.
    """
    scope = scope_for_kb(kb_id)
    namespace, created = CacheNamespace.objects.select_for_update().get_or_create(
        scope=scope, defaults={"knowledge_base_id": kb_id, "cache_epoch": 2}
    )
    if not created:
        CacheNamespace.objects.filter(pk=namespace.pk).update(cache_epoch=F("cache_epoch") + 1)
        namespace.refresh_from_db(fields=["cache_epoch"])
    transaction.on_commit(l1_epochs.clear)
    return namespace.cache_epoch


def bump_for_published_documents(*, document_ids: list[int]) -> list[int]:
    """Advance the epoch of every knowledge base whose active version holds one of these
    documents (inside the caller's transaction); returns those knowledge bases' ids.

    Called when a document's indexed content changes under a published version — re-indexed
    (new chunk ids), turned FAILED or READY — so that no cached candidate keeps pointing at
    chunks that no longer exist or misses a document that now answers. Draft-only documents
    move nothing: no cached result can contain them.
    """
    kb_ids = sorted(set(
        KnowledgeBase.objects.filter(active_version__documents__in=document_ids).values_list("pk", flat=True)
    ))
    for kb_id in kb_ids:
        bump_epoch(kb_id=kb_id)
    return kb_ids
