"""Loading files from disk into a knowledge base (the `ingest` command and the demo bootstrap)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.files import File
from django.db import reset_queries

from engines.milvus_store import is_embedded
from engines.providers import get_embedder
from ragsite.errors import DomainError, ValidationFailed

from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.models import Document, DocumentStatus, KnowledgeBase, KnowledgeBaseVersion, VersionStatus

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
    external_ids: Sequence[str] | None = None, titles: Sequence[str] | None = None, max_files: int | None = None,
) -> list[document_services.UploadOutcome]:
    handles = [path.open("rb") for path in paths]
    try:
        files = [File(handle, name=path.name) for handle, path in zip(handles, paths, strict=True)]
        return document_services.upload_documents(
            kb=kb, files=files, actor=actor, source_tag=source_tag, external_ids=external_ids,
            titles=titles, max_files=max_files,
        )
    finally:
        for handle in handles:
            handle.close()


def upload_all(*, kb: KnowledgeBase, paths: Sequence[Path], source_tag: str = "") -> list[FileOutcome]:
    """Upload many files in groups of one ingestion batch (at least the per-upload limit of
    clients): each group is one transaction and its documents' first task. A file refused by
    validation is reported and the others of its group are uploaded without it."""
    outcomes: dict[int, FileOutcome] = {}
    size = max(int(settings.RAG_MAX_FILES_PER_UPLOAD), int(settings.RAG_INGESTION_BATCH_DOCUMENTS), 1)
    for start in range(0, len(paths), size):
        # Each group is a unit of work like a request: under DEBUG its queries (large bulk
        # inserts) are not kept for the rest of a 100,000-file import.
        reset_queries()
        group = list(range(start, min(start + size, len(paths))))
        while group:
            try:
                results = upload_paths(kb=kb, paths=[paths[i] for i in group], source_tag=source_tag, max_files=size)
            except ValidationFailed as error:
                refused = {group[e["index"]]: e for e in error.extra.get("errors", []) if "index" in e}
                if not refused:  # nothing to single out: the group is refused as a whole
                    outcomes.update(_refused(paths, group, f"{error.code}: {error.message}"))
                    break
                for i, e in refused.items():
                    outcomes[i] = FileOutcome(paths[i], None, "refused", 0, 0.0, f"{e['code']}: {e['detail']}")
                group = [i for i in group if i not in refused]
                continue
            except DomainError as error:
                outcomes.update(_refused(paths, group, f"{error.code}: {error.message}"))
                break
            for i, result in zip(group, results, strict=True):
                outcomes[i] = FileOutcome(paths[i], result.document.pk, result.document.status, 0, 0.0, duplicate=result.duplicate)
            break
    return [outcomes[i] for i in range(len(paths))]


def _refused(paths: Sequence[Path], group: Sequence[int], error: str) -> dict[int, FileOutcome]:
    return {i: FileOutcome(paths[i], None, "refused", 0, 0.0, error) for i in group}


def default_workers(*, kb: KnowledgeBase) -> int:
    """Processes that `ingest --wait` runs the queue with: RAG_INGEST_WORKERS when set, else one
    per core (at most 4). One when Milvus is an embedded Milvus Lite file (one process at a
    time can open it) or when the knowledge base's embedder already spreads each call over every
    core (a local neural model: two processes only fight over the cores — measured 0.75 of its
    bare throughput with two, against one)."""
    if settings.RAG_INGEST_WORKERS > 0:
        return settings.RAG_INGEST_WORKERS
    if is_embedded(settings.MILVUS_URI or ""):
        return 1
    try:
        if get_embedder(kb.embedding_model, kb.embedding_dimension).uses_all_cores:
            return 1
    except ImproperlyConfigured:
        # The deployment cannot serve this model: each document will fail with the reason
        # (`embedding_mismatch`); one process is enough to say so.
        return 1
    return max(1, min(os.cpu_count() or 1, 4))


@contextmanager
def helper_workers(count: int) -> Iterator[list[subprocess.Popen]]:
    """`count` extra `ingestion_worker` processes on this queue, stopped (SIGTERM: each
    finishes its current task) when the block ends."""
    manage = Path(settings.BASE_DIR) / "manage.py"
    helpers = [
        subprocess.Popen(
            [sys.executable, str(manage), "ingestion_worker"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy(),
        )
        for _ in range(max(count, 0))
    ]
    try:
        yield helpers
    finally:
        for helper in helpers:
            helper.send_signal(signal.SIGTERM)
        for helper in helpers:
            try:
                helper.wait(timeout=120)
            except subprocess.TimeoutExpired:
                helper.kill()
                helper.wait()


def process_queue_until_done(document_ids: Sequence[int], *, timeout: float = 3600.0) -> None:
    """Run queued tasks in this process until these documents end (READY or FAILED).

    Other queued work is processed too (it is one queue); a worker running elsewhere (or a
    helper of `helper_workers`) may pick some of our tasks, so completion is judged by the
    documents' status, not by the queue.
    """
    from django_tasks_db.management.commands.db_worker import Worker

    deadline = time.monotonic() + timeout
    pending = set(document_ids)
    while pending:
        Worker(
            queue_names=["*"], interval=0, batch=True, backend_name="default",
            startup_delay=False, max_tasks=None, worker_id="ingest-cli", excluded_queue_names=[],
        ).run()
        pending = _still_pending(sorted(pending))
        if pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"documents still processing: {sorted(pending)}")
            time.sleep(0.5)


def _still_pending(ids: list[int], *, per_query: int = 5000) -> set[int]:
    # In slices: a 100,000-file import would pass SQLite's limit of bound parameters.
    pending: set[int] = set()
    for start in range(0, len(ids), per_query):
        pending.update(
            Document.objects.filter(pk__in=ids[start : start + per_query])
            .exclude(status__in=FINAL_STATUSES)
            .values_list("pk", flat=True)
        )
    return pending


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
    catalog_services.activate_version(version=candidate, actor=actor, reason=reason)
    return candidate
