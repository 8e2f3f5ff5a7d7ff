"""Background tasks (django-tasks; the database backend runs them in `manage.py db_worker`).

Each task lives next to the work it does; these names are the ones queued task rows written by
earlier versions refer to (`knowledge.tasks.ingest_document`, …), so they keep resolving.
"""

from __future__ import annotations

from knowledge.faqs.index import index_faqs
from knowledge.documents.ingestion.tasks import ingest_document_task as ingest_document
from knowledge.documents.ingestion.tasks import ingest_documents_task as ingest_documents
from knowledge.documents.reanalysis import reanalyse_task as reanalyse_knowledge_base
from knowledge.items.tasks import retag_items_task

__all__ = ["index_faqs", "ingest_document", "ingest_documents", "reanalyse_knowledge_base", "retag_items_task"]
