"""Reads of knowledge facts. Nothing here writes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, QuerySet, Window
from django.db.models.functions import RowNumber

from .models import (
    FAQ,
    Chunk,
    Document,
    DocumentStatus,
    DocumentTransition,
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


def chunk_contents(*, chunk_ids: Iterable[int]) -> dict[int, str]:
    """The own text of these chunks (one query), e.g. to place a cited sentence in its chunk."""
    ids = list(set(chunk_ids))
    if not ids:
        return {}
    return dict(Chunk.objects.filter(pk__in=ids).values_list("pk", "content"))


def ingestion_queue(*, now, knowledge_bases=None) -> dict:
    """What the ingestion queue holds now: waiting, running (with their workers' heartbeats),
    failed, and how long the oldest waiting document has waited, overall and per knowledge base
    (of `knowledge_bases`, a queryset, when given: the ones the viewer may see)."""
    from django.db.models import Count, Min, Q

    waiting, running = [DocumentStatus.UPLOADED, DocumentStatus.QUEUED], [DocumentStatus.PARSING, DocumentStatus.INDEXING]
    scope = KnowledgeBase.objects.all() if knowledge_bases is None else knowledge_bases
    per_kb = list(
        scope.annotate(
            waiting=Count("documents", filter=Q(documents__status__in=waiting)),
            running=Count("documents", filter=Q(documents__status__in=running)),
            failed=Count("documents", filter=Q(documents__status=DocumentStatus.FAILED)),
            oldest_waiting=Min("documents__status_changed_at", filter=Q(documents__status__in=waiting)),
        ).filter(Q(waiting__gt=0) | Q(running__gt=0) | Q(failed__gt=0)).order_by("name")
        .values("pk", "name", "slug", "waiting", "running", "failed", "oldest_waiting")
    )
    for row in per_kb:
        row["oldest_waiting_seconds"] = (now - row["oldest_waiting"]).total_seconds() if row["oldest_waiting"] else None
    in_progress = list(
        Document.objects.filter(status__in=running, knowledge_base__in=scope).select_related("knowledge_base")
        .order_by("status_changed_at")
        .values("pk", "title", "knowledge_base__name", "status", "attempts", "worker", "heartbeat_at",
                "lease_expires_at", "status_changed_at")
    )
    for row in in_progress:
        row["lease_expired"] = bool(row["lease_expires_at"] and row["lease_expires_at"] < now)
        row["running_seconds"] = (now - row["status_changed_at"]).total_seconds() if row["status_changed_at"] else None
    oldest = [r["oldest_waiting_seconds"] for r in per_kb if r["oldest_waiting_seconds"] is not None]
    return {
        "waiting": sum(r["waiting"] for r in per_kb),
        "running": len(in_progress),
        "failed": sum(r["failed"] for r in per_kb),
        "oldest_waiting_seconds": max(oldest) if oldest else None,
        "per_kb": per_kb,
        "in_progress": in_progress,
    }


@dataclass(frozen=True)
class TimelineStep:
    status: str
    label: str
    at: datetime
    seconds: float | None  # until the next step; for the current in-progress step, until now
    attempt: int | None
    worker: str
    error_code: str
    current: bool


def document_timeline(*, document: Document, now: datetime, limit: int = 50) -> list[TimelineStep]:
    """The document's last `limit` status changes, oldest first, each with how long it lasted."""
    rows = list(DocumentTransition.objects.filter(document=document).order_by("-at", "-id")[:limit])[::-1]
    steps = []
    for index, row in enumerate(rows):
        last = index == len(rows) - 1
        if not last:
            seconds = (rows[index + 1].at - row.at).total_seconds()
        elif row.status in (DocumentStatus.QUEUED, DocumentStatus.PARSING, DocumentStatus.INDEXING):
            seconds = (now - row.at).total_seconds()
        else:
            seconds = None  # READY / FAILED: the run ended there
        steps.append(TimelineStep(
            status=row.status, label=str(DocumentStatus(row.status).label), at=row.at, seconds=seconds,
            attempt=row.attempt, worker=row.worker, error_code=row.error_code, current=last,
        ))
    return steps


def example_questions(*, kb_ids: Iterable[int], limit: int = 4) -> dict[int, list[str]]:
    """Per knowledge base, the standard questions of its most asked enabled FAQs: what the empty
    chat page offers a newcomer to click. One query whatever the number of bases."""
    ranked = (
        FAQ.objects.filter(knowledge_base_id__in=list(kb_ids), enabled=True)
        .annotate(rank=Window(RowNumber(), partition_by=F("knowledge_base_id"),
                              order_by=[F("hit_count").desc(), F("pk").asc()]))
        .filter(rank__lte=limit)
        .order_by("knowledge_base_id", "rank")
        .values_list("knowledge_base_id", "question")
    )
    examples: dict[int, list[str]] = {}
    for kb_id, question in ranked:
        examples.setdefault(kb_id, []).append(question)
    return examples


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
