"""The ingestion pipeline: claim → parse → chunk → assets → embed → rows → index → READY.

Runs in a background task (django-tasks), on a batch of documents at a time: the per-document
stages run per document, the stages that cost per call (embedding, rows, vector upsert, READY)
once per batch. It is idempotent — a re-run replaces the document's
chunks, assets and vectors — and crash-safe: database writes and the Milvus upsert happen before
the document turns READY, and retrieval only ever serves READY documents, so a crash in between
leaves a document that is re-queued at worker start, never a half-indexed one that answers.

Traced (`ragsite.telemetry`, when configured): one `ingestion.batch` span per batch, an
`ingestion.knowledge_base` span per knowledge base in it, and under that a span per stage —
`parse`, `chunk`, `assets` per document, `embed`, `store`, `upsert`, `ready` once for the batch —
with ids and counts, never the documents' text or names.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.files.base import ContentFile
from django.db import transaction
from django.utils.translation import gettext as _

from engines.ports import (
    ChunkRecord,
    ProviderError,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderUnavailable,
    UnembeddableText,
    VectorStoreError,
    VectorStoreUnavailable,
)
from engines.providers import get_captioner, get_embedder
from engines.providers.local import LocalCaptioner
from engines.tokens import count_tokens
from ragsite.telemetry import in_span, mark_failed

from knowledge.documents import status as document_status
from knowledge.documents.ingestion.announce import publish_status, publish_statuses
from knowledge.documents.ingestion.heartbeat import EmbeddingProgress, Heartbeat
from knowledge.documents.status import Claim
from docparse.chunking import chunk_document
from knowledge.cleanup import (
    delete_asset_files_after_commit,
    delete_document_vectors,
    delete_previews_after_commit,
    delete_unreferenced_asset_files,
)
from knowledge.epochs import bump_for_published_documents
from knowledge.items.matching import ItemCatalog
from knowledge.items.selectors import catalog_for
from knowledge.items.tagging import tag_chunks
from knowledge.vectors import store_for
from knowledge.models import Chunk, Document, DocumentAsset, DocumentStatus, KnowledgeBase, KnowledgeBaseVersion
from docparse import ParseLimits
from docparse.isolated import ocr_image_text, parse_document
from knowledge.catalog.readiness import refresh_version_readiness
from docparse.types import ParsedImage, ParseError, ParseResult

logger = logging.getLogger(__name__)

EMBED_BATCH = 64


@dataclass
class StageTimer:
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, stage: str, started: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - started


@dataclass(frozen=True)
class IngestionReport:
    document_id: int
    status: str
    chunk_count: int = 0
    error_code: str = ""
    error_message: str = ""
    seconds: dict[str, float] = field(default_factory=dict)


class IngestionFailed(Exception):
    """`transient`: the input is fine, a service was not (model or vector store down, timed
    out, rate-limited): the document is retried later instead of failing."""

    def __init__(self, code: str, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.transient = transient


TRANSIENT_PROVIDER_ERRORS = (ProviderTimeout, ProviderRateLimited, ProviderUnavailable)


def parse_limits() -> ParseLimits:
    return replace(
        ParseLimits(),
        ocr_enabled=settings.RAG_OCR_ENABLED,
        ocr_seconds_per_page=settings.RAG_OCR_SECONDS_PER_PAGE,
        max_total_uncompressed=settings.RAG_MAX_ARCHIVE_UNCOMPRESSED_BYTES,
        max_archive_members=settings.RAG_MAX_ARCHIVE_MEMBERS,
        max_sheet_rows=settings.RAG_MAX_SHEET_ROWS,
        max_archive_member_bytes=settings.RAG_PARSE_MAX_MEMBER_BYTES,
    )


@dataclass(frozen=True)
class BatchRun:
    """How a batch ended: one report per id in the given order, the documents to run again
    after each backoff delay (seconds), and the first unexpected error, if any."""

    reports: list[IngestionReport]
    retries: dict[float, list[int]]
    crash: BaseException | None


def run_batch(*, document_ids: Sequence[int]) -> BatchRun:
    """Process a batch of documents end to end; it never raises for a document's failure.

    The batch shares what costs per call, not per document — the claim, the heartbeat, the
    embedding calls, one transaction for the chunk rows, one vector upsert, one READY
    transaction, one progress event per stage and one readiness check — while each document
    still ends on its own: a file that does not parse fails alone, and a shared stage that
    breaks unexpectedly is re-run document by document so that one bad document cannot fail
    its neighbours. A crash is recorded on its document and returned with the batch; whoever
    runs the batch (`tasks.ingest_documents`) enqueues the retries and re-raises it.
    """
    ids = list(dict.fromkeys(document_ids))
    with in_span("ingestion.batch") as span:
        run = _run_batch(ids)
        if span.is_recording():
            statuses = [report.status for report in run.reports]
            span.set_attributes({
                "rag.documents.requested": len(ids),
                "rag.documents.ready": statuses.count(DocumentStatus.READY),
                "rag.documents.failed": statuses.count(DocumentStatus.FAILED),
                "rag.documents.retried": sum(len(pks) for pks in run.retries.values()),
                "rag.chunks": sum(report.chunk_count for report in run.reports),
            })
            if run.crash is not None:
                mark_failed(span, run.crash)
    return run


def _run_batch(ids: list[int]) -> BatchRun:
    claims = document_status.claim_many(document_ids=ids)
    documents = Document.objects.select_related("knowledge_base").in_bulk([c.document_id for c in claims])
    jobs = [Job(document=documents[c.document_id], claim=c) for c in claims if c.document_id in documents]
    for kb_jobs in _by_knowledge_base(jobs):
        with in_span("ingestion.knowledge_base") as span:
            if span.is_recording():
                span.set_attributes({**_kb_attributes(kb_jobs[0].document.knowledge_base),
                                     "rag.documents": len(kb_jobs)})
            _process(kb_jobs)
    # After the READY commit: the check must see what other workers committed meanwhile.
    ready = [job.document.pk for job in jobs if job.outcome == DocumentStatus.READY]
    if ready:
        refresh_version_readiness(version_ids=list(
            KnowledgeBaseVersion.objects.filter(documents__in=ready).values_list("pk", flat=True).distinct()
        ))
    # One deferred run per backoff delay: a batch that met a model outage comes back as one
    # batch, not one task per document.
    retries: dict[float, list[int]] = {}
    for job in jobs:
        if job.outcome == "retry_scheduled" and job.retry_in:
            retries.setdefault(job.retry_in, []).append(job.document.pk)
    crash = next((job.crash for job in jobs if job.crash is not None), None)
    return BatchRun(reports=_reports(ids, {job.document.pk: job for job in jobs}), retries=retries, crash=crash)


@dataclass(eq=False)
class Job:
    """One document's run inside a batch: what each stage produced, and how it ended."""

    document: Document
    claim: Claim
    timer: StageTimer = field(default_factory=StageTimer)
    parsed: ParseResult | None = None
    drafts: list = field(default_factory=list)
    captions: dict[str, str] = field(default_factory=dict)
    contents: list[str] = field(default_factory=list)
    vectors: list = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    had_rows: bool = False
    outcome: str = ""  # READY, FAILED, retry_scheduled, deleted, lease_lost; "" while running
    error: IngestionFailed | None = None
    crash: BaseException | None = None
    retry_in: float = 0.0

    @property
    def running(self) -> bool:
        return not self.outcome and self.error is None and self.crash is None


def _by_knowledge_base(jobs: list[Job]) -> list[list[Job]]:
    groups: dict[int, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.document.knowledge_base_id, []).append(job)
    return list(groups.values())


def _process(jobs: list[Job]) -> None:
    kb = jobs[0].document.knowledge_base
    publish_statuses([job.document for job in jobs], DocumentStatus.PARSING)
    with Heartbeat([job.claim for job in jobs]) as beat:
        try:
            embedder = _embedder_for(kb)
        except IngestionFailed as exc:
            for job in jobs:
                job.error = exc
        else:
            for job in jobs:
                _guarded(job, "parse", _parse)
                if job.running:
                    _guarded(job, "chunk", _chunk)
            _to_indexing([job for job in jobs if job.running])
            for job in jobs:
                if job.running:
                    _guarded(job, "assets", _describe_images)
            _store_isolated(kb, embedder, [job for job in jobs if job.running], beat)
    for job in jobs:
        _settle(job)


def _guarded(job: Job, name: str, stage) -> None:
    """One document's own stage: its failure is its alone."""
    with in_span(f"ingestion.{name}") as span:
        try:
            stage(job)
        except IngestionFailed as exc:
            job.error = exc
            mark_failed(span, exc, code=exc.code)
        except Exception as exc:
            logger.exception("ingestion of document %s crashed", job.document.pk)
            job.crash = exc
            mark_failed(span, exc)
        if span.is_recording():
            span.set_attributes(_job_attributes(job))


def _kb_attributes(kb: KnowledgeBase) -> dict[str, int | str]:
    return {"rag.kb.id": kb.pk, "rag.kb.slug": kb.slug}


def _job_attributes(job: Job) -> dict[str, int | str]:
    """A document's stage in a span: ids, type, size and what the stages made of it so far."""
    document = job.document
    attributes: dict[str, int | str] = {
        "rag.document.id": document.pk,
        "rag.document.file_type": document.file_type,
        "rag.document.bytes": document.size,
        "rag.attempt": job.claim.attempt,
        **_kb_attributes(document.knowledge_base),
    }
    if job.parsed is not None:
        attributes["rag.pages"] = job.parsed.page_count or 0
        attributes["rag.images"] = len(job.parsed.images)
    if job.drafts:
        attributes["rag.chunks"] = len(job.drafts)
    return attributes


def _shared_attributes(kb: KnowledgeBase, jobs: list[Job]) -> dict[str, int | str]:
    return {**_kb_attributes(kb), "rag.documents": len(jobs),
            "rag.chunks": sum(len(job.contents) for job in jobs)}


def _parse(job: Job) -> None:
    document = job.document
    started = time.perf_counter()
    data = _read_original(document)
    try:
        job.parsed = parse_document(
            data,
            file_type=document.file_type,
            filename=document.original_name,
            limits=parse_limits(),
            text_encoding=document.metadata.get("text_encoding"),
            timeout=settings.RAG_PARSE_TIMEOUT_SECONDS,
        )
    except ParseError as exc:
        raise IngestionFailed(exc.code, exc.message, transient=exc.transient) from exc
    if job.parsed.ocr_timed_out_pages and job.claim.attempt < document_status.max_attempts():
        # Some scanned pages were not read in time (a busy machine, most likely): another run
        # may read them; the last run keeps what it read and says which pages are missing.
        raise IngestionFailed(
            "ocr_timeout",
            _("第 %(pages)s 页的文字识别（OCR）超时，未能提取全部文字。")
            % {"pages": "、".join(str(page) for page in job.parsed.ocr_timed_out_pages[:20])},
            transient=True,
        )
    job.timer.add("parse", started)


def _chunk(job: Job) -> None:
    document, kb = job.document, job.document.knowledge_base
    started = time.perf_counter()
    job.drafts = chunk_document(
        job.parsed,
        document_key=document.sha256,
        chunk_tokens=kb.chunk_size_tokens,
        overlap_tokens=kb.chunk_overlap_tokens,
    )
    if not job.drafts:
        raise IngestionFailed("no_text", _("文档中没有可提取的文字内容（扫描件识别也未得到文字）。"))
    job.timer.add("chunk", started)


def _to_indexing(jobs: list[Job]) -> None:
    if not jobs:
        return
    still = {claim.document_id for claim in document_status.advance_many([job.claim for job in jobs], DocumentStatus.INDEXING)}
    for job in jobs:
        if job.document.pk in still:
            job.document.status = DocumentStatus.INDEXING
        else:
            _lost(job)
    publish_statuses([job.document for job in jobs if job.running], DocumentStatus.INDEXING)


def _describe_images(job: Job) -> None:
    started = time.perf_counter()
    job.captions = _caption_images(job.parsed, job.drafts)
    job.contents = [
        _image_chunk_content(draft, job.captions) if draft.content_type == "image" else draft.content
        for draft in job.drafts
    ]
    job.timer.add("assets", started)


def _store_isolated(kb: KnowledgeBase, embedder, jobs: list[Job], beat: Heartbeat) -> None:
    """The shared stages for a batch; an unexpected failure re-runs them per document."""
    if not jobs:
        return
    try:
        _store(kb, embedder, jobs, beat)
    except IngestionFailed as exc:
        if exc.transient or len(jobs) == 1:
            # A service is down (model, vector store): the same for every document of the batch.
            for job in jobs:
                if job.running:
                    job.error = exc
            return
        # A refusal (a text the model rejects, a vector the store refuses) may be one
        # document's doing: find it instead of failing its neighbours.
        _one_by_one(kb, embedder, jobs, beat, exc)
    except Exception as exc:
        if len(jobs) == 1:
            logger.exception("ingestion of document %s crashed", jobs[0].document.pk)
            jobs[0].crash = exc
            return
        _one_by_one(kb, embedder, jobs, beat, exc)


def _one_by_one(kb: KnowledgeBase, embedder, jobs: list[Job], beat: Heartbeat, exc: Exception) -> None:
    logger.warning("a batch of %d documents failed (%s); retrying them one by one", len(jobs), exc)
    for job in jobs:
        if job.running:
            _store_isolated(kb, embedder, [job], beat)


def _store(kb: KnowledgeBase, embedder, jobs: list[Job], beat: Heartbeat) -> None:
    """embed → chunk rows → vectors → READY, each once for the whole batch."""
    share = 1 / len(jobs)

    started = time.perf_counter()
    with in_span("ingestion.embed") as span:
        if span.is_recording():
            span.set_attributes({**_shared_attributes(kb, jobs), "rag.embedding_model": kb.embedding_model})
        progress = EmbeddingProgress([(job.claim, job.document, len(job.contents)) for job in jobs])
        vectors = _embed(embedder, [content for job in jobs for content in job.contents], kb, progress)
    offset = 0
    for job in jobs:
        job.vectors = vectors[offset : offset + len(job.contents)]
        offset += len(job.contents)
    _add_shared(jobs, "embed", started, share)

    started = time.perf_counter()
    with in_span("ingestion.store") as span:
        if span.is_recording():
            span.set_attributes(_shared_attributes(kb, jobs))
        _replace_rows(jobs)
    _add_shared(jobs, "store", started, share)

    started = time.perf_counter()
    held = beat.held()
    for job in _running(jobs):
        if job.document.pk not in held:
            _lost(job)
    live = _running(jobs)
    with in_span("ingestion.upsert") as span:
        if span.is_recording():
            span.set_attributes(_shared_attributes(kb, live))
        _index(kb, live)
    _add_shared(live, "upsert", started, share)

    with in_span("ingestion.ready") as span:
        if span.is_recording():
            span.set_attributes(_shared_attributes(kb, live))
        _finish(live)


def _running(jobs: list[Job]) -> list[Job]:
    return [job for job in jobs if job.running]


def _add_shared(jobs: list[Job], stage: str, started: float, share: float) -> None:
    seconds = (time.perf_counter() - started) * share
    for job in jobs:
        job.timer.seconds[stage] = job.timer.seconds.get(stage, 0.0) + seconds


def _finish(jobs: list[Job]) -> None:
    if not jobs:
        return
    with transaction.atomic():
        results = {}
        for job in jobs:
            document, parsed = job.document, job.parsed
            title = document.title
            if document.metadata.get("title_from_file_name") and parsed.title:
                title = parsed.title[:300]
            results[job.document.pk] = {
                "title": title,
                "chunk_count": len(job.chunks),
                "embedded_chunks": len(job.chunks),
                "chunks_to_embed": len(job.chunks),
                "page_count": parsed.page_count,
                "metadata": {
                    **document.metadata,
                    "warnings": parsed.warnings[:20],
                    "ocr_pages": parsed.ocr_pages,
                    "batch_documents": len(jobs),
                    "stage_seconds": {k: round(v, 3) for k, v in job.timer.seconds.items()},
                },
            }
        done = {c.document_id for c in document_status.finish_many([(job.claim, results[job.document.pk]) for job in jobs])}
        finished = [job for job in jobs if job.document.pk in done]
        for job in finished:
            job.document.status = DocumentStatus.READY
            job.document.chunk_count = len(job.chunks)
            job.document.title = results[job.document.pk]["title"]
        bump_for_published_documents(document_ids=[job.document.pk for job in finished])
        publish_statuses([job.document for job in finished], DocumentStatus.READY)
    for job in jobs:
        if job.document.pk in done:
            job.outcome = DocumentStatus.READY
        else:
            _lost(job)


def _lost(job: Job) -> None:
    """The claim is gone: deleted meanwhile (the purge removes rows; we remove our vectors) or
    taken over after the lease expired (the run that owns it now decides; we write nothing)."""
    if Document.objects.filter(pk=job.document.pk).exists():
        logger.warning("ingestion of document %s stopped: its lease was taken over", job.document.pk)
        job.outcome = "lease_lost"
    else:
        _remove_vectors(job.document)
        job.outcome = "deleted"


def _settle(job: Job) -> None:
    """A document whose run went wrong ends now: retried later (transient), or FAILED."""
    if job.crash is not None:
        _fail(job.document, job.claim, "internal_error", _("处理文档时发生内部错误，请重试或联系管理员。"))
        job.outcome = DocumentStatus.FAILED
    elif job.error is not None:
        exc = job.error
        if exc.transient and job.claim.attempt < document_status.max_attempts():
            job.retry_in = _retry_later(job.document, job.claim, exc)
            job.outcome = "retry_scheduled"
        else:
            _fail(job.document, job.claim, exc.code, exc.message)
            job.outcome = DocumentStatus.FAILED


def _reports(ids: list[int], jobs: dict[int, Job]) -> list[IngestionReport]:
    others = dict(Document.objects.filter(pk__in=[pk for pk in ids if pk not in jobs]).values_list("pk", "status"))
    reports = []
    for pk in ids:
        job = jobs.get(pk)
        if job is None:  # another run has it, or it is not queued any more
            reports.append(IngestionReport(document_id=pk, status=others.get(pk, "deleted")))
            continue
        seconds = dict(job.timer.seconds)
        if job.outcome == "retry_scheduled":
            seconds["retry_in"] = job.retry_in
        reports.append(IngestionReport(
            document_id=pk, status=job.outcome, chunk_count=len(job.chunks) if job.outcome == DocumentStatus.READY else 0,
            error_code=job.error.code if job.error else ("internal_error" if job.crash else ""),
            error_message=job.error.message if job.error else "", seconds=seconds,
        ))
    return reports


def _embedder_for(kb: KnowledgeBase):
    try:
        embedder = get_embedder(kb.embedding_model, kb.embedding_dimension)
    except ImproperlyConfigured as exc:
        raise IngestionFailed(
            "embedding_mismatch",
            _("知识库使用向量模型 %(model)s（%(dim)d 维），当前配置的模型服务无法生成该向量：%(error)s")
            % {"model": kb.embedding_model, "dim": kb.embedding_dimension, "error": exc},
        ) from exc
    if embedder.model != kb.embedding_model or embedder.dimension != kb.embedding_dimension:
        raise IngestionFailed(
            "embedding_mismatch",
            _("知识库使用向量模型 %(kb_model)s（%(kb_dim)d 维），当前为 %(model)s（%(dim)d 维），拒绝混用。")
            % {
                "kb_model": kb.embedding_model, "kb_dim": kb.embedding_dimension,
                "model": embedder.model, "dim": embedder.dimension,
            },
        )
    return embedder


def _read_original(document: Document) -> bytes:
    try:
        with document.file.open("rb") as handle:
            data = handle.read(settings.RAG_MAX_UPLOAD_BYTES + 1)
    except (FileNotFoundError, OSError) as exc:
        raise IngestionFailed("file_missing", _("找不到原始文件，请重新上传。")) from exc
    if len(data) > settings.RAG_MAX_UPLOAD_BYTES:
        raise IngestionFailed("file_too_large", _("文件超过大小上限。"))
    if hashlib.sha256(data).hexdigest() != document.sha256:
        raise IngestionFailed("file_corrupt", _("存储中的文件与上传时的校验值不一致，请重新上传。"))
    return data


def _caption_images(parsed: ParseResult, drafts) -> dict[str, str]:
    """Caption the images that chunks refer to (vision model, or OCR + nearby text offline)."""
    wanted = {key for draft in drafts for key in draft.image_keys}
    if not wanted:
        return {}
    try:
        captioner = get_captioner()
    except ImproperlyConfigured as exc:
        # No vision model configured: describe images offline (OCR + nearby text) rather than
        # failing every document that contains a picture.
        logger.warning("captioner not configured, using the local one: %s", exc)
        captioner = LocalCaptioner()
    captions: dict[str, str] = {}
    ocr_budget = settings.RAG_MAX_OCR_IMAGES_PER_DOCUMENT
    for image in parsed.images:
        if image.key not in wanted:
            continue
        ocr_text = image.ocr_text
        if not ocr_text and ocr_budget > 0:
            # OCR costs seconds per image: bounded per document, the rest keep nearby text.
            ocr_budget -= 1
            ocr_text = _ocr_image(image)
        try:
            captions[image.key] = captioner.caption(
                image_jpeg=image.jpeg, context=image.nearby_text, ocr_text=ocr_text
            ).strip()
        except ProviderError as exc:
            # A caption is an aid to retrieval, not the evidence itself: keep the image with
            # its nearby text rather than failing the whole document.
            logger.warning("caption failed for image %s: %s", image.key, exc)
            captions[image.key] = (image.nearby_text or ocr_text)[:500]
    return captions


def _ocr_image(image: ParsedImage) -> str:
    if not settings.RAG_OCR_ENABLED:
        return ""
    seconds = settings.RAG_OCR_SECONDS_PER_PAGE
    # The sandbox's deadline only catches a hung engine; OCR keeps to `seconds` itself.
    return ocr_image_text(image.jpeg, seconds=seconds, timeout=seconds * 3 + 30)


def _image_chunk_content(draft, captions: dict[str, str]) -> str:
    texts = [captions[key] for key in draft.image_keys if captions.get(key)]
    if not texts:
        return draft.content
    return "\n".join(f"[图片] {text}" for text in texts)


def _embed(embedder, contents: list[str], kb: KnowledgeBase, progress: EmbeddingProgress) -> list[list[float]]:
    vectors: list[list[float]] = []
    progress.advance(0)
    try:
        for start in range(0, len(contents), EMBED_BATCH):
            vectors.extend(embedder.embed_documents(contents[start : start + EMBED_BATCH]))
            progress.advance(len(vectors))
    except UnembeddableText as exc:
        # Refused from now on, so a re-run of the batch document by document finds whose text
        # it is without the engine dying again.
        raise IngestionFailed(
            "text_unembeddable",
            _("文档中有向量模型无法处理的文字（处理时向量引擎异常退出），已停止处理该文档。请检查或修改文档内容后重新上传。"),
        ) from exc
    except ProviderError as exc:
        raise IngestionFailed(
            "embedding_failed", _("向量化失败：%(error)s。请稍后重试。") % {"error": exc},
            transient=isinstance(exc, TRANSIENT_PROVIDER_ERRORS),
        ) from exc
    if len(vectors) != len(contents) or any(len(v) != kb.embedding_dimension for v in vectors):
        raise IngestionFailed("embedding_mismatch", _("向量模型返回的向量数量或维度与知识库不一致。"))
    return vectors


@dataclass(frozen=True)
class StoredImage:
    image: ParsedImage
    sha256: str
    storage_key: str


def _replace_rows(jobs: list[Job]) -> None:
    """New chunk and asset rows in place of old ones, for the whole batch in one transaction.

    Asset images are written before the transaction (a file cannot take part in it); if the
    transaction fails, the images it would have referred to and nobody else does are removed.
    """
    stored, written = _store_asset_files(jobs)
    try:
        lost = _write_rows(jobs, stored)
    except BaseException:
        delete_unreferenced_asset_files(written)
        raise
    for job in lost:
        _lost(job)


def _store_asset_files(jobs: list[Job]) -> tuple[dict[int, list[StoredImage]], list[str]]:
    field = DocumentAsset._meta.get_field("file")
    stored: dict[int, list[StoredImage]] = {}
    written: list[str] = []
    for job in jobs:
        wanted = {key for draft in job.drafts for key in draft.image_keys}
        for image in (img for img in job.parsed.images if img.key in wanted):
            sha = hashlib.sha256(image.jpeg).hexdigest()
            key = field.generate_filename(DocumentAsset(document=job.document, sha256=sha), "asset.jpg")
            if not field.storage.exists(key):
                key = field.storage.save(key, ContentFile(image.jpeg))
                written.append(key)
            stored.setdefault(job.document.pk, []).append(StoredImage(image, sha, key))
    return stored, written


@transaction.atomic
def _write_rows(jobs: list[Job], stored: dict[int, list[StoredImage]]) -> list[Job]:
    """Returns the jobs whose claim was gone (deleted or taken over): nothing written for them."""
    held = document_status.lock_many([job.claim for job in jobs])
    lost = [job for job in jobs if job.document.pk not in held]
    live = [job for job in jobs if job.document.pk in held]
    ids = [job.document.pk for job in live]
    with_rows = set(Chunk.objects.filter(document_id__in=ids).values_list("document_id", flat=True).distinct())
    old_asset_keys = list(DocumentAsset.objects.filter(document_id__in=ids).values_list("file", flat=True))
    if with_rows:
        Chunk.objects.filter(document_id__in=with_rows).delete()
    if old_asset_keys:
        DocumentAsset.objects.filter(document_id__in=ids).delete()

    new_keys: set[str] = set()
    chunks: list[Chunk] = []
    for job in live:
        document = job.document
        asset_ids: dict[str, int] = {}
        for ordinal, item in enumerate(stored.get(document.pk, [])):
            image = item.image
            asset = DocumentAsset(
                document=document,
                ordinal=ordinal,
                page=image.page,
                bbox=image.bbox.as_list() if image.bbox else [],
                width=image.width,
                height=image.height,
                caption=job.captions.get(image.key, ""),
                sha256=item.sha256,
            )
            asset.file.name = item.storage_key
            asset.save()
            new_keys.add(item.storage_key)
            asset_ids[image.key] = asset.pk
        chunks.extend(
            Chunk(
                document=document,
                knowledge_base_id=document.knowledge_base_id,
                ordinal=draft.ordinal,
                parent_id=draft.parent_id,
                heading_path=list(draft.heading_path),
                locator=draft.locator,
                bboxes=draft.bboxes,
                content_type=draft.content_type,
                content=content,
                token_count=draft.token_count if content == draft.content else count_tokens(content),
                asset_ids=[asset_ids[key] for key in draft.image_keys if key in asset_ids],
            )
            for draft, content in zip(job.drafts, job.contents, strict=True)
        )
    created = Chunk.objects.bulk_create(chunks, batch_size=500)
    catalogs: dict[int, ItemCatalog] = {}
    offset = 0
    for job in live:
        job.chunks = created[offset : offset + len(job.drafts)]
        offset += len(job.drafts)
        kb_id = job.document.knowledge_base_id
        if kb_id not in catalogs:
            catalogs[kb_id] = catalog_for(kb_ids=[kb_id])
        for chunk in job.chunks:
            chunk.document = job.document
        tag_chunks(kb_id=kb_id, chunks=job.chunks, catalog=catalogs[kb_id])
        job.had_rows = job.document.pk in with_rows
        if job.had_rows:
            delete_previews_after_commit(kb_id=job.document.knowledge_base_id, document_id=job.document.pk)
    delete_asset_files_after_commit([key for key in old_asset_keys if key not in new_keys])
    return lost


def _index(kb: KnowledgeBase, jobs: list[Job]) -> None:
    if not jobs:
        return
    try:
        store = store_for(kb)
        for job in jobs:
            # Replace, not merge: a re-run may produce fewer chunks than the previous one. A
            # first attempt that found no earlier rows cannot have left vectors behind
            # (attempts is counted when the job is claimed), so its delete round-trip is skipped.
            if job.claim.attempt > 1 or job.had_rows:
                store.delete_document(kb_id=kb.pk, document_id=job.document.pk)
        store.upsert_chunks(
            [
                ChunkRecord(
                    chunk_id=chunk.pk, kb_id=kb.pk, document_id=job.document.pk,
                    content=chunk.content, content_type=chunk.content_type, vector=vector,
                )
                for job in jobs
                for chunk, vector in zip(job.chunks, job.vectors, strict=True)
            ],
            dictionary=kb.dictionary_terms,
        )
    except VectorStoreError as exc:
        raise IngestionFailed(
            getattr(exc, "code", "vector_store_error"),
            _("写入向量库失败：%(error)s。请稍后重试。") % {"error": exc},
            transient=isinstance(exc, VectorStoreUnavailable),
        ) from exc


def _remove_vectors(document: Document) -> None:
    kb = document.knowledge_base
    delete_document_vectors(
        kb_id=kb.pk, document_id=document.pk,
        embedding_model=kb.embedding_model, dimension=kb.embedding_dimension, analysis=kb.text_analysis,
    )


def _retry_later(document: Document, claim: Claim, exc: IngestionFailed) -> float:
    """Back to QUEUED with the reason shown, to be run again after an exponential backoff
    (RAG_INGESTION_RETRY_BASE_SECONDS × 2^(attempt − 1)); returns the delay in seconds, 0
    when the claim was gone (nothing to retry: another run owns the document)."""
    delay = float(settings.RAG_INGESTION_RETRY_BASE_SECONDS) * 2 ** (claim.attempt - 1)
    message = _("%(error)s 将在 %(s)s 秒后自动重试（第 %(n)s 次，共 %(max)s 次）。") % {
        "error": exc.message, "s": int(delay), "n": claim.attempt + 1, "max": document_status.max_attempts(),
    }
    with transaction.atomic():
        if not document_status.retry_later(claim, code=exc.code, message=message):
            return 0.0
        document.status = DocumentStatus.QUEUED
        publish_status(document, DocumentStatus.QUEUED, error_code=exc.code, error_message=message)
    return delay


def _fail(document: Document, claim: Claim, code: str, message: str) -> None:
    """FAILED with a code and message; the rows of a partial run are removed now and its
    vectors after commit, so nothing half-indexed remains (and a retry starts from nothing).
    Nothing at all when the claim is gone: the run that owns the document now must not lose
    its rows."""
    with transaction.atomic():
        try:
            document_status.lock(claim)
        except (document_status.LeaseLost, Document.DoesNotExist):
            logger.warning("document %s: not marked failed (%s), another run owns it", document.pk, code)
            return
        Chunk.objects.filter(document_id=document.pk).delete()
        asset_keys = list(DocumentAsset.objects.filter(document_id=document.pk).values_list("file", flat=True))
        DocumentAsset.objects.filter(document_id=document.pk).delete()
        delete_asset_files_after_commit(asset_keys)
        delete_previews_after_commit(kb_id=document.knowledge_base_id, document_id=document.pk)
        transaction.on_commit(lambda: _remove_vectors(document))
        document_status.fail(claim, code=code, message=message)
        document.status = DocumentStatus.FAILED
        bump_for_published_documents(document_ids=[document.pk])
        publish_status(document, DocumentStatus.FAILED, error_code=code, error_message=message)


