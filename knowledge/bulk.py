"""Loading files from disk into a knowledge base (the `ingest` command and the demo bootstrap)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from django.core.files import File

from . import services
from .models import Document, DocumentStatus, KnowledgeBase, KnowledgeBaseVersion, VersionStatus

FINAL_STATUSES = {DocumentStatus.READY, DocumentStatus.FAILED}


@dataclass(frozen=True)
class FileOutcome:
    path: Path
    document_id: int | None
    status: str
    chunks: int
    seconds: float
    error: str = ""
    duplicate: bool = False


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given, directories recursively (sorted, hidden files skipped)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(
                p for p in sorted(path.rglob("*"))
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(str(path))
    return found


def upload_paths(
    *, kb: KnowledgeBase, paths: Sequence[Path], actor=None, source_tag: str = "",
    external_ids: Sequence[str] | None = None, titles: Sequence[str] | None = None,
) -> list[services.UploadOutcome]:
    handles = [path.open("rb") for path in paths]
    try:
        files = [File(handle, name=path.name) for handle, path in zip(handles, paths, strict=True)]
        return services.upload_documents(
            kb=kb, files=files, actor=actor, source_tag=source_tag, external_ids=external_ids,
            titles=titles,
        )
    finally:
        for handle in handles:
            handle.close()


def process_queue_until_done(document_ids: Sequence[int], *, timeout: float = 3600.0) -> None:
    """Run queued tasks in this process until these documents end (READY or FAILED).

    Other queued work is processed too (it is one queue); a worker running elsewhere may pick
    some of our tasks, so completion is judged by the documents' status, not by the queue.
    """
    from django_tasks_db.management.commands.db_worker import Worker

    deadline = time.monotonic() + timeout
    pending = set(document_ids)
    while pending:
        Worker(
            queue_names=["*"], interval=0, batch=True, backend_name="default",
            startup_delay=False, max_tasks=None, worker_id="ingest-cli", excluded_queue_names=[],
        ).run()
        pending = set(
            Document.objects.filter(pk__in=pending)
            .exclude(status__in=FINAL_STATUSES)
            .values_list("pk", flat=True)
        )
        if pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"documents still processing: {sorted(pending)}")
            time.sleep(0.5)


def publish_when_ready(*, kb: KnowledgeBase, actor=None, reason: str) -> KnowledgeBaseVersion | None:
    """Activate the newest READY version that is not yet active; None when there is none."""
    kb.refresh_from_db()
    candidate = (
        KnowledgeBaseVersion.objects.filter(knowledge_base=kb, status=VersionStatus.READY)
        .order_by("-number")
        .first()
    )
    if candidate is None or (kb.active_version_id and candidate.number < kb.active_version.number):
        return None
    services.activate_version(version=candidate, actor=actor, reason=reason)
    return candidate
