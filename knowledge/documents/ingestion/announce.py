"""Live announcements of a document's status: one event per document, or one per batch of
documents reaching the same stage (per knowledge base), for the admin list and the API stream."""

from __future__ import annotations

from collections.abc import Sequence

from knowledge import events
from knowledge.models import Document, DocumentStatus


def publish_status(document: Document, status: str, **extra) -> None:
    events.publish_kb_event(kb_id=document.knowledge_base_id, event="document", data=status_event(document, status, **extra))


def publish_statuses(documents: Sequence[Document], status: str) -> None:
    """One event for a batch's documents reaching the same stage (per knowledge base)."""
    by_kb: dict[int, list[dict]] = {}
    for document in documents:
        by_kb.setdefault(document.knowledge_base_id, []).append(status_event(document, status))
    for kb_id, items in by_kb.items():
        events.publish_kb_event(kb_id=kb_id, event="documents", data={"documents": items})


def status_event(document: Document, status: str, **extra) -> dict:
    return {
        "document": document.pk,
        "title": document.title,
        "status": status,
        "status_label": str(DocumentStatus(status).label),
        "chunk_count": document.chunk_count,
        "attempts": document.attempts,
        **extra,
    }


