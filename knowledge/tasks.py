"""Background tasks (django-tasks; the database backend runs them in `manage.py db_worker`)."""

from __future__ import annotations

from django.conf import settings
from django.utils import translation
from django_tasks import task


@task(queue_name="ingestion")
def ingest_document(*, document_id: int) -> dict:
    from .ingestion import ingest_document as run

    # Error messages are stored for every staff member to read: write them in the site's
    # language, whatever language the thread that enqueued the task happened to use.
    with translation.override(settings.LANGUAGE_CODE):
        report = run(document_id=document_id)
    return {
        "document_id": report.document_id,
        "status": str(report.status),
        "chunk_count": report.chunk_count,
        "error_code": report.error_code,
        "seconds": {k: round(v, 3) for k, v in report.seconds.items()},
    }


@task(queue_name="ingestion")
def index_faqs(*, kb_id: int, faq_ids: list[int]) -> dict:
    from .faq_index import reindex_faqs

    return {"kb_id": kb_id, "records": reindex_faqs(kb_id=kb_id, faq_ids=faq_ids)}


@task(queue_name="ingestion")
def reanalyse_knowledge_base(*, kb_id: int) -> dict:
    from .reanalysis import reanalyse_knowledge_base as run

    return {"kb_id": kb_id, **run(kb_id=kb_id)}
