"""Reads of knowledge facts. Nothing here writes."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

from .models import (
    Chunk,
    Document,
    DocumentStatus,
    KnowledgeBase,
    KnowledgeBaseVersion,
    VersionStatus,
)


def ready_documents_of_active_version(
    *, kb_id: int, document_ids: Iterable[int] | None = None
) -> QuerySet[Document]:
    """The READY documents of the knowledge base's active version, optionally ∩ `document_ids`.

    Every retrieval starts from this set: a document that is not in it (draft only, failed,
    half-indexed, another knowledge base) must never reach an answer, even if vectors exist.
    At most one version per KB is ACTIVE (database constraint), so the join yields no duplicates.
    """
    queryset = Document.objects.filter(
        knowledge_base_id=kb_id,
        status=DocumentStatus.READY,
        versions__knowledge_base_id=kb_id,
        versions__status=VersionStatus.ACTIVE,
    )
    if document_ids is not None:
        queryset = queryset.filter(pk__in=list(document_ids))
    return queryset


def ready_document_ids_of_active_version(
    *, kb_id: int, document_ids: Iterable[int] | None = None
) -> list[int]:
    return sorted(
        ready_documents_of_active_version(kb_id=kb_id, document_ids=document_ids).values_list(
            "pk", flat=True
        )
    )


def unready_documents(*, version: KnowledgeBaseVersion) -> QuerySet[Document]:
    return version.documents.exclude(status=DocumentStatus.READY).order_by("pk")


def retained_versions_holding(*, document: Document) -> QuerySet[KnowledgeBaseVersion]:
    """Versions that still need the document's chunks and vectors (anything not retired)."""
    return document.versions.exclude(status=VersionStatus.RETIRED)


def previous_active_version(*, kb: KnowledgeBase) -> KnowledgeBaseVersion | None:
    """The version that was active before the current one, if it can still be activated."""
    activation = kb.activations.filter(to_version=kb.active_version_id).select_related(
        "from_version"
    ).first() if kb.active_version_id else None
    if activation is None or activation.from_version is None:
        return None
    if activation.from_version.status != VersionStatus.READY:
        return None
    return activation.from_version


def chunk_contents(*, chunk_ids: Iterable[int]) -> dict[int, str]:
    """The own text of these chunks (one query), e.g. to place a cited sentence in its chunk."""
    ids = list(set(chunk_ids))
    if not ids:
        return {}
    return dict(Chunk.objects.filter(pk__in=ids).values_list("pk", "content"))
