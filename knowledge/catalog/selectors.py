"""Reads of knowledge bases and their versions: which documents a version serves, which versions
hold a document, what publishing a version changes. Nothing here writes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import F, QuerySet

from knowledge.models import Document, DocumentStatus, KnowledgeBase, KnowledgeBaseVersion, VersionStatus



def ready_documents_of_active_version(
    *, kb_id: int, document_ids: Iterable[int] | None = None
) -> QuerySet[Document]:
    """The READY documents of the knowledge base's active version, optionally ∩ `document_ids`.

    Every retrieval starts from this set: a document that is not in it (draft only, failed,
    half-indexed, another knowledge base) must never reach an answer, even if vectors exist.
    At most one version per KB is ACTIVE (database constraint), so the join yields no duplicates.
    """
    return ready_documents_of_active_versions(kb_ids=[kb_id], document_ids=document_ids)


def ready_documents_of_active_versions(
    *, kb_ids: Iterable[int], document_ids: Iterable[int] | None = None
) -> QuerySet[Document]:
    """The same set for several knowledge bases in one query: each document through its own
    knowledge base's active version (PostgreSQL carries `knowledge_base_id = k` over the join,
    so one base's query is planned as it was with the constant)."""
    queryset = Document.objects.filter(
        knowledge_base_id__in=list(kb_ids),
        status=DocumentStatus.READY,
        versions__knowledge_base_id=F("knowledge_base_id"),
        versions__status=VersionStatus.ACTIVE,
    )
    if document_ids is not None:
        queryset = queryset.filter(pk__in=list(document_ids))
    return queryset


def ready_documents_of_version(
    *, version: KnowledgeBaseVersion, document_ids: Iterable[int] | None = None
) -> QuerySet[Document]:
    """The READY documents of one version (a draft under a release check), optionally ∩ ids."""
    queryset = Document.objects.filter(
        knowledge_base_id=version.knowledge_base_id, status=DocumentStatus.READY, versions=version
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
    # The not-READY statuses spelled out (not `exclude(READY)`) and the KB named, so the
    # (knowledge_base, status) index finds the few pending rows of a large draft instead of
    # every member being read: this runs after every ingestion batch.
    pending = [status for status in DocumentStatus.values if status != DocumentStatus.READY]
    return version.documents.filter(knowledge_base_id=version.knowledge_base_id, status__in=pending).order_by("pk")


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



@dataclass(frozen=True)
class VersionChanges:
    """What publishing `version` changes for readers, against the knowledge base's live version
    (`against` None: nothing is live, every document is new). Document titles, sorted.
    A document counts as changed when the live version holds another file of the same name."""

    against: int | None
    added: tuple[str, ...]
    changed: tuple[str, ...]
    removed: tuple[str, ...]


def version_changes(*, version: KnowledgeBaseVersion) -> VersionChanges:
    active = version.knowledge_base.active_version
    if active is not None and active.pk == version.pk:
        return VersionChanges(against=active.number, added=(), changed=(), removed=())
    mine = {doc.pk: doc for doc in version.documents.only("pk", "title", "original_name")}
    live = {doc.pk: doc for doc in active.documents.only("pk", "title", "original_name")} if active else {}
    new = [doc for pk, doc in mine.items() if pk not in live]
    gone = [doc for pk, doc in live.items() if pk not in mine]
    gone_names = {doc.original_name for doc in gone}
    new_names = {doc.original_name for doc in new}
    return VersionChanges(
        against=active.number if active else None,
        added=tuple(sorted(doc.title for doc in new if doc.original_name not in gone_names)),
        changed=tuple(sorted(doc.title for doc in new if doc.original_name in gone_names)),
        removed=tuple(sorted(doc.title for doc in gone if doc.original_name not in new_names)),
    )
