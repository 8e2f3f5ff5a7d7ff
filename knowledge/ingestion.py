"""The ingestion pipeline of one document: sniff → parse → chunk → assets → embed → index → READY.

Runs in a background task (django-tasks). It is idempotent — a re-run replaces the document's
chunks, assets and vectors — and crash-safe: database writes and the Milvus upsert happen before
the document turns READY, and retrieval only ever serves READY documents, so a crash in between
leaves a document that is re-queued at worker start, never a half-indexed one that answers.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.files.base import ContentFile
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from django.utils import translation
from django.utils.translation import gettext as _
from django_tasks import task

from engines.ports import (
    ChunkRecord,
    ProviderError,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderUnavailable,
    VectorStoreError,
    VectorStoreUnavailable,
)
from engines.providers import get_captioner, get_embedder
from engines.providers.local import LocalCaptioner
from engines.tokens import count_tokens

from . import document_status, events
from .document_status import Claim, LeaseLost
from .chunking import chunk_document
from .cleanup import delete_asset_files_after_commit, delete_document_vectors, delete_previews_after_commit
from .epochs import bump_for_published_documents
from .vectors import store_for
from .models import Chunk, Document, DocumentAsset, DocumentStatus, KnowledgeBase
from .parsing import ParseLimits, parse_document
from .readiness import refresh_version_readiness
from .parsing.types import ParsedImage, ParseError, ParseResult

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


def ingest_document(*, document_id: int) -> IngestionReport:
    """Process one document end to end. Never raises for bad input: it ends FAILED instead."""
    timer = StageTimer()
    claim = document_status.claim(document_id=document_id)
    if claim is None:
        current = Document.objects.filter(pk=document_id).values_list("status", flat=True).first()
        return IngestionReport(document_id=document_id, status=current or "deleted")
    document = Document.objects.select_related("knowledge_base").filter(pk=document_id).first()
    if document is None:  # deleted right after the claim
        return IngestionReport(document_id=document_id, status="deleted")
    _publish(document, DocumentStatus.PARSING)
    try:
        with Heartbeat(claim) as beat:
            chunk_count = _run(document, claim, beat, timer)
    except IngestionFailed as exc:
        if exc.transient and claim.attempt < document_status.max_attempts():
            delay = _retry_later(document, claim, exc)
            return IngestionReport(
                document_id=document_id, status="retry_scheduled", error_code=exc.code,
                error_message=exc.message, seconds={**timer.seconds, "retry_in": delay},
            )
        _fail(document, claim, exc.code, exc.message)
        return IngestionReport(
            document_id=document_id, status=DocumentStatus.FAILED, error_code=exc.code,
            error_message=exc.message, seconds=timer.seconds,
        )
    except Document.DoesNotExist:
        # Deleted while we worked: the purge removes what we wrote.
        _remove_vectors(document)
        return IngestionReport(document_id=document_id, status="deleted", seconds=timer.seconds)
    except LeaseLost:
        # Another run owns the document now (our lease expired): it decides, we write nothing.
        logger.warning("ingestion of document %s stopped: its lease was taken over", document_id)
        return IngestionReport(document_id=document_id, status="lease_lost", seconds=timer.seconds)
    except Exception:
        # Recorded on the document for staff and re-raised so the task result shows it too.
        logger.exception("ingestion of document %s crashed", document_id)
        _fail(document, claim, "internal_error", _("处理文档时发生内部错误，请重试或联系管理员。"))
        raise
    # After the READY commit and outside the handlers above: the document is indexed whatever
    # the draft's state, and the check must see what other workers committed meanwhile.
    refresh_version_readiness(version_ids=list(document.versions.values_list("pk", flat=True)))
    return IngestionReport(
        document_id=document_id, status=DocumentStatus.READY, chunk_count=chunk_count,
        seconds=timer.seconds,
    )


class Heartbeat:
    """Extends the run's lease every third of it, on its own thread and connection, while the
    run works; `lost` is set when the claim is gone (the lease had expired and was taken)."""

    def __init__(self, claim: Claim) -> None:
        self.claim = claim
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{claim.document_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def check(self) -> None:
        if self.lost.is_set() or not document_status.held(self.claim).exists():
            self.lost.set()
            raise document_status.LeaseLost(f"document {self.claim.document_id}: lease lost")

    def _beat(self) -> None:
        interval = max(document_status.lease_seconds() / 3, 0.2)
        try:
            while not self._stop.wait(interval):
                try:
                    if not document_status.heartbeat(self.claim):
                        self.lost.set()
                        return
                except DatabaseError as exc:
                    # The next beat may get through; the lease is long enough for a few misses.
                    logger.warning("heartbeat of document %s failed: %s", self.claim.document_id, exc)
        finally:
            connection.close()


def _run(document: Document, claim: Claim, beat: Heartbeat, timer: StageTimer) -> int:
    kb = document.knowledge_base
    embedder = _embedder_for(kb)

    started = time.perf_counter()
    data = _read_original(document)
    try:
        parsed = parse_document(
            data,
            file_type=document.file_type,
            filename=document.original_name,
            limits=parse_limits(),
            text_encoding=document.metadata.get("text_encoding"),
        )
    except ParseError as exc:
        raise IngestionFailed(exc.code, exc.message) from exc
    timer.add("parse", started)

    started = time.perf_counter()
    drafts = chunk_document(
        parsed,
        document_key=document.sha256,
        chunk_tokens=kb.chunk_size_tokens,
        overlap_tokens=kb.chunk_overlap_tokens,
    )
    if not drafts:
        raise IngestionFailed("no_text", _("文档中没有可提取的文字内容（扫描件识别也未得到文字）。"))
    timer.add("chunk", started)

    with transaction.atomic():
        document_status.advance(claim, DocumentStatus.INDEXING)
        document.status = DocumentStatus.INDEXING
        _publish(document, DocumentStatus.INDEXING)

    started = time.perf_counter()
    captions = _caption_images(parsed, drafts)
    contents = [
        _image_chunk_content(draft, captions) if draft.content_type == "image" else draft.content
        for draft in drafts
    ]
    timer.add("assets", started)

    started = time.perf_counter()
    vectors = _embed(embedder, contents, kb)
    timer.add("embed", started)

    started = time.perf_counter()
    chunks, had_rows = _replace_rows(document, claim, parsed, drafts, contents, captions)
    timer.add("store", started)

    started = time.perf_counter()
    # A first attempt that found no earlier rows cannot have left vectors behind (attempts is
    # counted when the job is claimed), so the delete round-trip is skipped.
    first_run = claim.attempt <= 1 and not had_rows
    beat.check()
    _index(kb, document, chunks, vectors, replace=not first_run)
    timer.add("upsert", started)

    title = document.title
    if document.metadata.get("title_from_file_name") and parsed.title:
        title = parsed.title[:300]
    with transaction.atomic():
        document_status.finish(
            claim,
            title=title,
            chunk_count=len(chunks),
            page_count=parsed.page_count,
            metadata={
                **document.metadata,
                "warnings": parsed.warnings[:20],
                "ocr_pages": parsed.ocr_pages,
                "stage_seconds": {k: round(v, 3) for k, v in timer.seconds.items()},
            },
        )
        document.status = DocumentStatus.READY
        document.chunk_count = len(chunks)
        document.title = title
        bump_for_published_documents(document_ids=[document.pk])
        _publish(document, DocumentStatus.READY)
    return len(chunks)


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
    # Loaded on first use: the OCR engine (onnxruntime and its models) costs seconds to import,
    # and most documents have no image to read.
    from .parsing.ocr import ocr_image_text

    return ocr_image_text(image.jpeg, seconds=settings.RAG_OCR_SECONDS_PER_PAGE)


def _image_chunk_content(draft, captions: dict[str, str]) -> str:
    texts = [captions[key] for key in draft.image_keys if captions.get(key)]
    if not texts:
        return draft.content
    return "\n".join(f"[图片] {text}" for text in texts)


def _embed(embedder, contents: list[str], kb: KnowledgeBase) -> list[list[float]]:
    vectors: list[list[float]] = []
    try:
        for start in range(0, len(contents), EMBED_BATCH):
            vectors.extend(embedder.embed_documents(contents[start : start + EMBED_BATCH]))
    except ProviderError as exc:
        raise IngestionFailed(
            "embedding_failed", _("向量化失败：%(error)s。请稍后重试。") % {"error": exc},
            transient=isinstance(exc, TRANSIENT_PROVIDER_ERRORS),
        ) from exc
    if len(vectors) != len(contents) or any(len(v) != kb.embedding_dimension for v in vectors):
        raise IngestionFailed("embedding_mismatch", _("向量模型返回的向量数量或维度与知识库不一致。"))
    return vectors


@transaction.atomic
def _replace_rows(document, claim: Claim, parsed: ParseResult, drafts, contents, captions) -> tuple[list[Chunk], bool]:
    """New chunk and asset rows in place of old ones; returns (chunks, whether old rows existed)."""
    document_status.lock(claim)  # raises if deleted or taken over meanwhile
    old_asset_keys = list(
        DocumentAsset.objects.filter(document=document).values_list("file", flat=True)
    )
    had_rows = Chunk.objects.filter(document=document).delete()[0] > 0
    DocumentAsset.objects.filter(document=document).delete()

    wanted = {key for draft in drafts for key in draft.image_keys}
    asset_ids: dict[str, int] = {}
    new_keys: set[str] = set()
    for ordinal, image in enumerate(img for img in parsed.images if img.key in wanted):
        sha = hashlib.sha256(image.jpeg).hexdigest()
        asset = DocumentAsset(
            document=document,
            ordinal=ordinal,
            page=image.page,
            bbox=image.bbox.as_list() if image.bbox else [],
            width=image.width,
            height=image.height,
            caption=captions.get(image.key, ""),
            sha256=sha,
        )
        storage_key = asset.file.field.generate_filename(asset, "asset.jpg")
        if not asset.file.storage.exists(storage_key):
            asset.file.save("asset.jpg", ContentFile(image.jpeg), save=False)
        else:
            asset.file.name = storage_key
        new_keys.add(asset.file.name)
        asset.save()
        asset_ids[image.key] = asset.pk


    chunks = Chunk.objects.bulk_create(
        [
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
            for draft, content in zip(drafts, contents, strict=True)
        ]
    )
    delete_asset_files_after_commit([key for key in old_asset_keys if key not in new_keys])
    if had_rows:
        delete_previews_after_commit(kb_id=document.knowledge_base_id, document_id=document.pk)
    return chunks, had_rows


def _index(kb: KnowledgeBase, document: Document, chunks: list[Chunk], vectors, *, replace: bool) -> None:
    try:
        store = store_for(kb)
        if replace:
            # Replace, not merge: a re-run may produce fewer chunks than the previous one.
            store.delete_document(kb_id=kb.pk, document_id=document.pk)
        store.upsert_chunks(
            [
                ChunkRecord(
                    chunk_id=chunk.pk, kb_id=kb.pk, document_id=document.pk,
                    content=chunk.content, content_type=chunk.content_type, vector=vector,
                )
                for chunk, vector in zip(chunks, vectors, strict=True)
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
    """Back to QUEUED with the reason shown, and a new task after an exponential backoff
    (RAG_INGESTION_RETRY_BASE_SECONDS × 2^(attempt − 1)); returns the delay in seconds."""
    delay = float(getattr(settings, "RAG_INGESTION_RETRY_BASE_SECONDS", 10.0)) * 2 ** (claim.attempt - 1)
    message = _("%(error)s 将在 %(s)s 秒后自动重试（第 %(n)s 次，共 %(max)s 次）。") % {
        "error": exc.message, "s": int(delay), "n": claim.attempt + 1, "max": document_status.max_attempts(),
    }
    with transaction.atomic():
        if not document_status.retry_later(claim, code=exc.code, message=message):
            return 0.0
        document.status = DocumentStatus.QUEUED
        _publish(document, DocumentStatus.QUEUED, error_code=exc.code, error_message=message)
        document_id = document.pk
        transaction.on_commit(lambda: _enqueue_after(document_id, delay))
    return delay


def _enqueue_after(document_id: int, delay: float) -> None:
    task = ingest_document_task
    if task.get_backend().supports_defer:
        task = task.using(run_after=timezone.now() + timedelta(seconds=delay))
    task.enqueue(document_id=document_id)


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
        _publish(document, DocumentStatus.FAILED, error_code=code, error_message=message)


def _publish(document: Document, status: str, **extra) -> None:
    events.publish_kb_event(
        kb_id=document.knowledge_base_id,
        event="document",
        data={
            "document": document.pk,
            "title": document.title,
            "status": status,
            "status_label": str(DocumentStatus(status).label),
            "chunk_count": document.chunk_count,
            "attempts": document.attempts,
            **extra,
        },
    )


def requeue_stale_documents(*, older_than: timedelta | None = None) -> list[int]:
    """Re-queue documents whose run died mid-way (worker crash, kill, power loss): their lease
    expired. Runs at worker start and then periodically in every worker.

    QUEUED documents older than RAG_INGESTION_STALE_SECONDS are re-queued too: their task may
    have been lost between the commit and the enqueue. A document whose runs died
    RAG_INGESTION_MAX_ATTEMPTS times stops in FAILED with the reason instead of looping.
    """
    if older_than is None:
        older_than = timedelta(seconds=getattr(settings, "RAG_INGESTION_STALE_SECONDS", 900))
    expired, lost = document_status.stale(queued_before=timezone.now() - older_than)
    limit = document_status.max_attempts()
    exhausted = list(
        Document.objects.filter(pk__in=expired, attempts__gte=limit).values_list("pk", flat=True)
    )
    if exhausted:
        with transaction.atomic():
            document_status.give_up(
                document_ids=exhausted, code="too_many_attempts",
                message=_("文档处理了 %(n)s 次都没有完成（处理进程中断），已停止重试。请检查文件后点击重试。") % {"n": limit},
            )
            for document in Document.objects.filter(pk__in=exhausted):
                _publish(document, DocumentStatus.FAILED, error_code="too_many_attempts")
    stale = [pk for pk in expired if pk not in exhausted] + lost
    if stale:
        with transaction.atomic():
            queue_documents(document_ids=stale)
    return stale


def queue_documents(*, document_ids: Sequence[int], fresh_attempts: bool = False) -> None:
    """→ QUEUED and a task each after commit (inside the caller's transaction). A published
    document leaving READY (re-index) stops answering now, not when the cache expires."""
    ids = list(document_ids)
    if not ids:
        return
    document_status.queue(document_ids=ids, fresh_attempts=fresh_attempts)
    bump_for_published_documents(document_ids=ids)

    def enqueue() -> None:
        for document_id in ids:
            ingest_document_task.enqueue(document_id=document_id)

    transaction.on_commit(enqueue)


@task(queue_name="ingestion")
def ingest_document_task(*, document_id: int) -> dict:
    # Error messages are stored for every staff member to read: write them in the site's
    # language, whatever language the thread that enqueued the task happened to use.
    with translation.override(settings.LANGUAGE_CODE):
        report = ingest_document(document_id=document_id)
    return {
        "document_id": report.document_id,
        "status": str(report.status),
        "chunk_count": report.chunk_count,
        "error_code": report.error_code,
        "seconds": {k: round(v, 3) for k, v in report.seconds.items()},
    }
