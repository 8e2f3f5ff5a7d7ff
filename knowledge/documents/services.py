"""Uploads and the document queue: files checked before anything is stored, stored once per
content, added to the knowledge base's draft and queued for ingestion after commit; a failed
document's retry; a dictionary change re-analysed in the background.
"""

from __future__ import annotations

import errno
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.utils.translation import gettext as _

from ragsite.errors import Conflict, InvalidTransition, ServiceUnavailable, ValidationFailed

from engines.analysis import LEGACY_ANALYSIS
from engines.lexical import visible_text
from knowledge import audit, epochs
from knowledge.actors import Actor, user_or_none
from knowledge.attributes import clean_attributes
from knowledge.catalog.services import draft_for_writing
from knowledge.documents.ingestion.queue import queue_documents
from knowledge.documents.reanalysis import reanalyse_task
from knowledge.documents.sniffing import SniffResult, sniff
from knowledge.intake import FileRejected, IntakeLimits, check_file
from knowledge.models import AuditAction, Document, DocumentStatus, KnowledgeBase


@dataclass(frozen=True)
class UploadOutcome:
    document: Document
    duplicate: bool


@dataclass(frozen=True)
class _CheckedUpload:
    upload: UploadedFile
    sniffed: SniffResult
    sha256: str


def upload_documents(
    *,
    kb: KnowledgeBase,
    files: Sequence[UploadedFile],
    actor: Actor,
    source_tag: str = "",
    external_ids: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    max_files: int | None = None,
    attributes: Mapping[str, object] | None = None,
) -> list[UploadOutcome]:
    """Validate every file, store them, add them to the KB's draft and queue ingestion.

    Validation happens before anything is stored: one bad file refuses the whole upload with
    per-file errors, so a client never has to guess which part landed. `max_files` replaces
    RAG_MAX_FILES_PER_UPLOAD (a limit for clients) for trusted server-side callers such as
    `manage.py ingest`. `attributes` (staff's metadata, `knowledge.attributes`) are given to
    every new document of the upload; a file already there keeps its own (change them on
    the document).
    """
    given_attributes = clean_attributes(attributes or {})
    limit = max_files or settings.RAG_MAX_FILES_PER_UPLOAD
    if not files:
        raise ValidationFailed(_("请至少选择一个文件。"), code="no_files")
    if len(files) > limit:
        raise ValidationFailed(
            _("一次最多上传 %(n)d 个文件。") % {"n": limit},
            code="too_many_files",
        )
    if external_ids is not None and len(external_ids) != len(files):
        raise ValidationFailed(_("外部 ID 的数量必须与文件数量一致。"), code="invalid_external_ids")
    if titles is not None and len(titles) != len(files):
        raise ValidationFailed(_("标题的数量必须与文件数量一致。"), code="invalid_titles")
    checked = _check_uploads(files)
    stored_keys: list[str] = []
    found_keys: set[str] = set()
    try:
        # Inside the try: when the third file does not fit, the first two must not stay behind.
        for item in checked:
            key, existed = _store_original(kb=kb, item=item)
            stored_keys.append(key)
            if existed:
                found_keys.add(key)
        return _register_uploads(
            kb=kb, checked=checked, stored_keys=stored_keys, actor=actor, found_keys=found_keys,
            source_tag=source_tag, external_ids=external_ids, titles=titles, attributes=given_attributes,
        )
    except BaseException:
        _delete_unreferenced_files(kb_id=kb.pk, keys=stored_keys)
        raise


def _check_uploads(files: Sequence[UploadedFile]) -> list[_CheckedUpload]:
    checked: list[_CheckedUpload] = []
    errors: list[dict[str, str]] = []
    for index, upload in enumerate(files):
        name = upload.name or "unnamed"
        try:
            check_file(name=name, data=upload.file, limits=IntakeLimits.for_documents())
            sniffed = sniff(upload.file, filename=name)
        except FileRejected as exc:
            errors.append({"file": name, "index": index, "code": exc.code, "detail": str(exc.message)})
            continue
        checked.append(_CheckedUpload(upload=upload, sniffed=sniffed, sha256=_sha256(upload)))
    if errors:
        codes = {error["code"] for error in errors}
        code = codes.pop() if len(codes) == 1 else "invalid_files"
        if len(errors) == 1:
            detail = f"{errors[0]['file']}: {errors[0]['detail']}"
        else:
            detail = _("%(n)d 个文件未通过校验，未保存任何文件。") % {"n": len(errors)}
        raise ValidationFailed(detail, code=code, errors=errors)
    return checked


def _sha256(upload: UploadedFile) -> str:
    digest = hashlib.sha256()
    upload.seek(0)
    for block in upload.chunks():
        digest.update(block)
    upload.seek(0)
    return digest.hexdigest()


def _storage_key(kb: KnowledgeBase, sha256: str) -> str:
    probe = Document(knowledge_base=kb, sha256=sha256)
    return Document._meta.get_field("file").generate_filename(probe, "upload")


def _store_original(*, kb: KnowledgeBase, item: _CheckedUpload) -> tuple[str, bool]:
    """Store the bytes under their content address; identical bytes are stored once. Returns
    (key, whether the file was already there)."""
    storage = Document._meta.get_field("file").storage
    key = _storage_key(kb, item.sha256)
    if storage.exists(key):
        if storage.size(key) == item.upload.size:
            return key, True
        # What a failed or killed write left behind: the address is of these bytes, store them.
        storage.delete(key)
    item.upload.seek(0)
    try:
        saved = storage.save(key, item.upload)
    except OSError as exc:
        # FileSystemStorage leaves the part it wrote (disk full, quota, I/O error): remove it
        # so the content address never points at truncated bytes.
        if storage.exists(key) and storage.size(key) != item.upload.size:
            storage.delete(key)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StorageFull(_("存储空间已满，文件未保存，请联系管理员。")) from exc
        raise ServiceUnavailable(_("文件存储暂时不可用，文件未保存，请稍后重试。"), code="storage_unavailable") from exc
    if saved != key:  # a storage that renames on collision: keep exactly one copy
        storage.delete(saved)
        raise Conflict(_("文件存储冲突，请重试。"), code="storage_conflict")
    return key, False


class StorageFull(ServiceUnavailable):
    code = "storage_full"
    http_status = 507


def _delete_unreferenced_files(*, kb_id: int, keys: Sequence[str]) -> None:
    storage = Document._meta.get_field("file").storage
    referenced = set(Document.objects.filter(knowledge_base_id=kb_id, file__in=keys).values_list("file", flat=True))
    for key in set(keys) - referenced:
        storage.delete(key)


@transaction.atomic
def _register_uploads(
    *,
    kb: KnowledgeBase,
    checked: Sequence[_CheckedUpload],
    stored_keys: Sequence[str],
    found_keys: set[str],
    actor: Actor,
    source_tag: str,
    external_ids: Sequence[str] | None,
    titles: Sequence[str] | None,
    attributes: Mapping[str, object],
) -> list[UploadOutcome]:
    kb = KnowledgeBase.objects.select_for_update().get(pk=kb.pk)
    # Under the KB lock the purge of an earlier document with the same bytes cannot run
    # (`cleanup`): if it deleted a shared file after `_store_original` found it, store again.
    storage = Document._meta.get_field("file").storage
    for item, key in zip(checked, stored_keys, strict=True):
        if key in found_keys and not storage.exists(key):
            _store_original(kb=kb, item=item)
    draft = draft_for_writing(kb, actor)
    # One query, one insert and one membership write for the whole upload, however many files.
    known = {d.sha256: d for d in Document.objects.filter(knowledge_base=kb, sha256__in=[c.sha256 for c in checked])}
    created: list[Document] = []
    queued: list[int] = []
    slots: list[tuple[str, bool]] = []  # (sha256, duplicate) per file, in the given order
    for index, (item, key) in enumerate(zip(checked, stored_keys, strict=True)):
        existing = known.get(item.sha256)
        if existing is not None:
            if existing.pk is not None and existing.status in (DocumentStatus.UPLOADED, DocumentStatus.FAILED):
                # Uploading the same bytes again is how people retry: give a failed one another go.
                queued.append(existing.pk)
            slots.append((item.sha256, True))
            continue
        name = item.upload.name or "unnamed"
        given_title = titles[index].strip() if titles and titles[index] else ""
        metadata = {"text_encoding": item.sniffed.text_encoding} if item.sniffed.text_encoding else {}
        if not given_title:
            # The file's own title (DOCX / PPTX / PDF properties) replaces this once parsed.
            metadata["title_from_file_name"] = True
        document = Document(
            knowledge_base=kb,
            title=(given_title or _title_from_name(name))[:300],
            original_name=name[:300],
            file_type=item.sniffed.file_type,
            mime_type=item.sniffed.mime_type,
            sha256=item.sha256,
            size=item.upload.size,
            source_tag=source_tag,
            external_id=(external_ids[index] if external_ids else ""),
            metadata=metadata,
            attributes=dict(attributes),
            created_by=user_or_none(actor),
            status=DocumentStatus.UPLOADED,
        )
        document.file.name = key
        known[item.sha256] = document
        created.append(document)
        slots.append((item.sha256, False))
    Document.objects.bulk_create(created, batch_size=500)
    draft.documents.add(*known.values())
    queue_documents(document_ids=queued + [d.pk for d in created])
    fresh = Document.objects.in_bulk([known[sha].pk for sha, _dup in slots])
    names = [d.original_name for d in created] + [fresh[pk].original_name for pk in queued if pk in fresh]
    if names:  # bytes already there and not failed: nothing was written
        audit.record(kb=kb, actor=actor, action=AuditAction.DOCUMENTS_UPLOADED,
                     target=_("%(n)d 个文件：%(names)s") % {"n": len(names), "names": "、".join(names[:5]) + ("…" if len(names) > 5 else "")})
    return [UploadOutcome(document=fresh[known[sha].pk], duplicate=duplicate) for sha, duplicate in slots]


def _title_from_name(name: str) -> str:
    """The file name without its folder and extension; a name of only spaces (or of invisible
    characters) gives no title to read, so the document is called 未命名文档."""
    base = visible_text(name.rsplit("/", 1)[-1])
    stem = visible_text(base.rsplit(".", 1)[0]) if "." in base else base
    return (stem or _("未命名文档"))[:300]


@transaction.atomic
def schedule_reanalysis(*, kb: KnowledgeBase, actor: Actor) -> None:
    """Re-analyse the knowledge base's indexed chunks and FAQs with its current dictionary, in
    the background after commit (documents stay READY and searchable meanwhile)."""
    if kb.text_analysis == LEGACY_ANALYSIS:
        # Milvus analyses those collections itself: a dictionary cannot reach them.
        raise InvalidTransition(
            _("该知识库创建时使用旧的文本分析（Milvus jieba），领域词典对它不生效；请新建知识库并重新导入文档。"),
            code="legacy_text_analysis",
        )
    kb_id = kb.pk
    audit.record(kb=kb, actor=actor, action=AuditAction.REANALYSIS_SCHEDULED)
    transaction.on_commit(lambda: reanalyse_task.enqueue(kb_id=kb_id))


@transaction.atomic
def requeue_documents(*, document_ids: Sequence[int]) -> None:
    """Put documents back in the queue (crash recovery, re-index after a settings change)."""
    queue_documents(document_ids=document_ids)


@transaction.atomic
def set_document_attributes(*, document: Document, attributes: Mapping[str, object], actor: Actor) -> Document:
    """Replace the document's attributes (staff's metadata) with `attributes`, checked by
    `knowledge.attributes`. Retrieval filters on them, so the knowledge base's cache epoch moves
    and no answer cached under the old values is served. Writing the same values changes
    nothing and logs nothing."""
    cleaned = clean_attributes(attributes)
    document = Document.objects.select_for_update().select_related("knowledge_base").get(pk=document.pk)
    if document.attributes == cleaned:
        return document
    changed = sorted(set(document.attributes) ^ set(cleaned) | {
        key for key in set(document.attributes) & set(cleaned) if document.attributes[key] != cleaned[key]
    })
    document.attributes = cleaned
    document.save(update_fields=["attributes", "updated_at"])
    epochs.bump_epoch(kb_id=document.knowledge_base_id)
    audit.record(
        kb=document.knowledge_base, actor=actor, action=AuditAction.DOCUMENT_ATTRIBUTES_UPDATED,
        target=_("%(title)s：%(keys)s") % {"title": document.title, "keys": "、".join(changed)},
    )
    return document


@transaction.atomic
def retry_document(*, document: Document, actor: Actor) -> Document:
    document = Document.objects.select_for_update().get(pk=document.pk)
    if document.status != DocumentStatus.FAILED:
        raise InvalidTransition(
            _("只有失败的文档可以重试，当前状态为「%(s)s」。") % {"s": document.get_status_display()},
            code="document_not_failed",
        )
    queue_documents(document_ids=[document.pk], fresh_attempts=True)
    audit.record(kb=document.knowledge_base, actor=actor, action=AuditAction.DOCUMENT_RETRIED, target=document.title)
    document.refresh_from_db()
    return document

