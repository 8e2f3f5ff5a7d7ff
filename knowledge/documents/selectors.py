"""Reads of documents: chunk texts, the ingestion queue, a document's status timeline. Nothing
here writes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from knowledge.models import Chunk, Document, DocumentStatus, DocumentTransition, KnowledgeBase



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


