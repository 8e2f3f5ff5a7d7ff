"""The ingestion tasks and their entry point: a batch run, then the retries it scheduled
enqueued with their backoff (one deferred task per delay), then its crash re-raised.

Queued rows name these tasks by module path; migration 0010 moved the rows of the earlier path.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils import translation
from django_tasks import task

from knowledge.documents.ingestion.runner import IngestionReport, run_batch


def ingest_document(*, document_id: int) -> IngestionReport:
    """Process one document end to end. Never raises for bad input: it ends FAILED instead."""
    return ingest_documents(document_ids=[document_id])[0]


def ingest_documents(*, document_ids: Sequence[int]) -> list[IngestionReport]:
    """Process a batch (`runner.run_batch`), enqueue the retries it scheduled, and re-raise a
    crash once every document of the batch is settled, so the task result shows it too."""
    run = run_batch(document_ids=document_ids)
    for delay, ids in run.retries.items():
        transaction.on_commit(lambda delay=delay, ids=ids: _enqueue_after(ids, delay))
    if run.crash is not None:
        raise run.crash
    return run.reports


def _enqueue_after(document_ids: list[int], delay: float) -> None:
    task_ = ingest_documents_task
    if task_.get_backend().supports_defer:
        task_ = task_.using(run_after=timezone.now() + timedelta(seconds=delay))
    task_.enqueue(document_ids=document_ids)


@task(queue_name="ingestion")
def ingest_documents_task(*, document_ids: list[int]) -> dict:
    # Error messages are stored for every staff member to read: write them in the site's
    # language, whatever language the thread that enqueued the task happened to use.
    with translation.override(settings.LANGUAGE_CODE):
        reports = ingest_documents(document_ids=document_ids)
    return {
        "documents": [
            {
                "document_id": report.document_id,
                "status": str(report.status),
                "chunk_count": report.chunk_count,
                "error_code": report.error_code,
                "seconds": {k: round(v, 3) for k, v in report.seconds.items()},
            }
            for report in reports
        ]
    }


@task(queue_name="ingestion")
def ingest_document_task(*, document_id: int) -> dict:
    """One document per task, as earlier versions queued them (rows still in a queue)."""
    return ingest_documents_task.call(document_ids=[document_id])["documents"][0]
