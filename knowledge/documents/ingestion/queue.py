"""The ingestion queue: documents → QUEUED with a task per batch after commit, and the sweep
that re-queues documents whose run died (an expired lease) or whose task was lost."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from knowledge.documents import status as document_status
from knowledge.documents.ingestion.announce import publish_status
from knowledge.documents.ingestion.tasks import ingest_documents_task
from knowledge.epochs import bump_for_published_documents
from knowledge.models import Document, DocumentStatus


def requeue_stale_documents(*, older_than: timedelta | None = None) -> list[int]:
    """Re-queue documents whose run died mid-way (worker crash, kill, power loss): their lease
    expired. Runs at worker start and then periodically in every worker.

    QUEUED documents older than RAG_INGESTION_STALE_SECONDS are re-queued too: their task may
    have been lost between the commit and the enqueue. A document whose runs died
    RAG_INGESTION_MAX_ATTEMPTS times stops in FAILED with the reason instead of looping.
    """
    if older_than is None:
        older_than = timedelta(seconds=settings.RAG_INGESTION_STALE_SECONDS)
    expired, lost = document_status.stale(queued_before=timezone.now() - older_than)
    limit = document_status.max_attempts()
    exhausted = list(
        Document.objects.filter(pk__in=expired, attempts__gte=limit).values_list("pk", flat=True)
    )
    if exhausted:
        with transaction.atomic():
            document_status.give_up(
                document_ids=exhausted, code="too_many_attempts",
                message=_("文档处理了 %(n)s 次都没有完成（处理进程中断），已停止重试。请检查文件后点击重试。") % {"n": limit},
            )
            for document in Document.objects.filter(pk__in=exhausted):
                publish_status(document, DocumentStatus.FAILED, error_code="too_many_attempts")
    stale = [pk for pk in expired if pk not in exhausted] + lost
    if stale:
        with transaction.atomic():
            queue_documents(document_ids=stale)
    return stale


def queue_documents(*, document_ids: Sequence[int], fresh_attempts: bool = False) -> None:
    """→ QUEUED and a task each after commit (inside the caller's transaction). A published
    document leaving READY (re-index) stops answering now, not when the cache expires."""
    ids = list(document_ids)
    if not ids:
        return
    document_status.queue(document_ids=ids, fresh_attempts=fresh_attempts)
    bump_for_published_documents(document_ids=ids)

    batches = _task_batches(ids)

    def enqueue() -> None:
        for batch in batches:
            ingest_documents_task.enqueue(document_ids=batch)

    transaction.on_commit(enqueue)


def _task_batches(ids: list[int]) -> list[list[int]]:
    """Consecutive documents per task, up to RAG_INGESTION_BATCH_DOCUMENTS documents and
    RAG_INGESTION_BATCH_BYTES of files (a large file gets a task of its own)."""
    most = max(int(settings.RAG_INGESTION_BATCH_DOCUMENTS), 1)
    budget = int(settings.RAG_INGESTION_BATCH_BYTES)
    sizes = dict(Document.objects.filter(pk__in=ids).values_list("pk", "size"))
    batches: list[list[int]] = []
    current: list[int] = []
    used = 0
    for pk in ids:
        size = sizes.get(pk, 0)
        if current and (len(current) >= most or used + size > budget):
            batches.append(current)
            current, used = [], 0
        current.append(pk)
        used += size
    if current:
        batches.append(current)
    return batches

