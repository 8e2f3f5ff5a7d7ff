"""Writes and workflows on knowledge facts.

Every public function takes keyword-only arguments, runs in one transaction, and defers side
effects (queueing ingestion, deleting files and vectors, clearing in-process caches, publishing
events) to `transaction.on_commit`, so a rolled-back write leaves nothing behind.
"""

from __future__ import annotations

import errno
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, Group
from django.core.exceptions import ImproperlyConfigured, ValidationError as DjangoValidationError
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction
from django.db.models import F, Max
from django.utils import timezone
from django.utils.translation import gettext as _

from engines.milvus_store import LEGACY_ANALYSIS
from engines.providers import embedding_space
from ragsite.errors import Conflict, InvalidTransition, ServiceUnavailable, ValidationFailed

from . import epochs, events
from .cleanup import schedule_knowledge_base_purge, schedule_purge
from .faq_index import schedule_faq_reindex
from .ingestion import queue_documents
from .links import normalise_link_hosts
# mark_version_ready / refresh_version_readiness are part of this module's write API too.
from .release_gate import blocking_reason, release_gate
from .readiness import mark_version_ready, refresh_readiness_after_commit, refresh_version_readiness  # noqa: F401
from .reanalysis import reanalyse_task
from .models import (
    FAQ,
    ActivationAction,
    CacheNamespace,
    Document,
    DocumentStatus,
    KnowledgeBase,
    KnowledgeBaseVersion,
    VersionActivation,
    VersionStatus,
    Visibility,
)
from .selectors import previous_active_version, retained_versions_holding
from .sniffing import FileRejected, SniffResult, sniff

Actor = AbstractBaseUser | None
UNCHANGED = object()  # an optional argument that was not given (None is a value)


# --- knowledge bases -------------------------------------------------------------------------


@transaction.atomic
def create_knowledge_base(
    *,
    slug: str,
    name: str,
    actor: Actor,
    description: str = "",
    visibility: str = Visibility.INTERNAL,
    allowed_groups: Sequence[Group] = (),
    editor_groups: Sequence[Group] = (),
    publisher_groups: Sequence[Group] = (),
    support_contact: str = "",
    chunk_size_tokens: int = 512,
    chunk_overlap_tokens: int = 48,
    embedding_model: str | None = None,
    embedding_dimension: int | None = None,
    custom_terms: str = "",
    link_allowed_hosts: Sequence[str] = (),
) -> KnowledgeBase:
    """`embedding_model` unset: the deployment's default (RAG_EMBEDDING_MODEL).
    `link_allowed_hosts`: the hosts whose links stay clickable in answers (knowledge/links.py).

    A creator who is not a superuser must be in one of the publisher groups: otherwise nobody
    but a superuser could ever publish the new knowledge base, the creator included."""
    if not _is_superuser(actor) and not _shares_group(actor, publisher_groups):
        raise ValidationFailed(
            _("请把你所在的一个用户组设为发布者用户组，否则创建后你将无法管理这个知识库。"),
            code="publisher_group_required",
        )
    if KnowledgeBase.objects.filter(slug=slug).exists():
        raise Conflict(_("标识 %(slug)s 已被使用。") % {"slug": slug}, code="slug_taken")
    if chunk_overlap_tokens >= chunk_size_tokens:
        raise ValidationFailed(_("子块重叠必须小于子块大小。"), code="invalid_chunking")
    try:
        model, dimension = embedding_space(embedding_model, embedding_dimension)
    except ImproperlyConfigured as exc:
        raise ValidationFailed(str(exc), code="invalid_embedding_model") from exc
    kb = KnowledgeBase(
        slug=slug,
        name=name,
        description=description,
        visibility=visibility,
        support_contact=support_contact,
        chunk_size_tokens=chunk_size_tokens,
        chunk_overlap_tokens=chunk_overlap_tokens,
        embedding_model=model,
        embedding_dimension=dimension,
        custom_terms=custom_terms,
        link_allowed_hosts=_link_hosts_text(link_allowed_hosts),
        created_by=_user_or_none(actor),
    )
    _validate_model(kb)
    kb.save()
    if allowed_groups:
        kb.allowed_groups.set(allowed_groups)
    kb.editor_groups.set(editor_groups)
    kb.publisher_groups.set(publisher_groups)
    CacheNamespace.objects.create(scope=epochs.scope_for_kb(kb.pk), knowledge_base=kb, cache_epoch=1)
    return kb


@transaction.atomic
def update_knowledge_base(
    *,
    kb: KnowledgeBase,
    actor: Actor,
    name: str | None = None,
    description: str | None = None,
    visibility: str | None = None,
    allowed_groups: Sequence[Group] | None = None,
    editor_groups: Sequence[Group] | None = None,
    publisher_groups: Sequence[Group] | None = None,
    support_contact: str | None = None,
    custom_terms: str | None = None,
    release_max_regression_points: float | None | object = UNCHANGED,
    link_allowed_hosts: Sequence[str] | None = None,
) -> KnowledgeBase:
    """Edit presentation, access settings, the dictionary, the release-check limit (None:
    show the check, never block) and the hosts whose links stay clickable in answers (they
    apply to answers given from then on; stored answers keep the text they were given with).
    The embedding space and the text analysis never change after
    creation. A new dictionary applies to questions at once and to indexed chunks after
    `schedule_reanalysis`."""
    kb = KnowledgeBase.objects.select_for_update().get(pk=kb.pk)
    for attribute, value in (
        ("name", name), ("description", description), ("visibility", visibility),
        ("support_contact", support_contact), ("custom_terms", custom_terms),
    ):
        if value is not None:
            setattr(kb, attribute, value)
    if release_max_regression_points is not UNCHANGED:
        kb.release_max_regression_points = release_max_regression_points
    if link_allowed_hosts is not None:
        kb.link_allowed_hosts = _link_hosts_text(link_allowed_hosts)
    _validate_model(kb)
    kb.save()
    if allowed_groups is not None:
        kb.allowed_groups.set(allowed_groups)
    if editor_groups is not None:
        kb.editor_groups.set(editor_groups)
    if publisher_groups is not None:
        kb.publisher_groups.set(publisher_groups)
    if visibility is not None or allowed_groups is not None:
        # Cached candidates are keyed by visibility scope; make sure none outlives a change.
        epochs.bump_epoch(kb_id=kb.pk)
    return kb


# --- versions ----------------------------------------------------------------------------------


@transaction.atomic
def create_draft_version(
    *,
    kb: KnowledgeBase,
    actor: Actor,
    label: str = "",
    notes: str = "",
    base: KnowledgeBaseVersion | None = None,
) -> KnowledgeBaseVersion:
    """A new BUILDING version holding the documents of `base` (default: the active version)."""
    kb = KnowledgeBase.objects.select_for_update().get(pk=kb.pk)
    if KnowledgeBaseVersion.objects.filter(knowledge_base=kb, status=VersionStatus.BUILDING).exists():
        raise Conflict(_("该知识库已有一个构建中的草稿版本。"), code="draft_exists")
    if base is None:
        base = kb.active_version
    elif base.knowledge_base_id != kb.pk:
        raise ValidationFailed(_("基础版本不属于该知识库。"), code="invalid_version")
    number = (kb.versions.aggregate(n=Max("number"))["n"] or 0) + 1
    version = KnowledgeBaseVersion.objects.create(
        knowledge_base=kb,
        number=number,
        label=label,
        notes=notes,
        based_on=base,
        created_by=_user_or_none(actor),
    )
    if base is not None:
        version.documents.set(base.documents.all())
    return version


def _draft_for_writing(kb: KnowledgeBase, actor: Actor) -> KnowledgeBaseVersion:
    """The KB's draft, created when missing. Runs inside the caller's transaction.

    A new draft continues from the newest version that is not yet published (READY and newer
    than the active one) when there is one, so that consecutive uploads accumulate instead of
    silently dropping a finished but unpublished version; otherwise it starts from the active
    version's documents.
    """
    draft = (
        KnowledgeBaseVersion.objects.select_for_update()
        .filter(knowledge_base=kb, status=VersionStatus.BUILDING)
        .first()
    )
    if draft is not None:
        return draft
    unpublished = KnowledgeBaseVersion.objects.filter(
        knowledge_base=kb, status=VersionStatus.READY
    )
    if kb.active_version_id:
        unpublished = unpublished.filter(number__gt=kb.active_version.number)
    base = unpublished.order_by("-number").first() or kb.active_version
    return create_draft_version(kb=kb, actor=actor, base=base)


@transaction.atomic
def activate_version(
    *, version: KnowledgeBaseVersion, actor: Actor, reason: str = "", override_release_check: bool = False
) -> VersionActivation:
    """Publish a READY version: pointer, activation log and cache epoch in one transaction.

    When the knowledge base blocks regressions, a draft whose release check regressed beyond
    the limit (or has not finished) is refused, unless `override_release_check` — which needs
    a reason and is recorded with the check in the activation log.
    """
    gate = release_gate()
    report = gate.report(version=version) if gate is not None else None
    refusal = blocking_reason(version=version, report=report)
    if refusal and not override_release_check:
        raise InvalidTransition(refusal, code="release_check_blocked")
    if refusal and not reason.strip():
        raise ValidationFailed(_("强制发布必须填写原因。"), code="override_needs_reason")
    check = report.as_dict() if report is not None else {}
    if refusal:
        check["overridden"] = True
        check["refusal"] = refusal
    return _switch_active_version(
        version=version, actor=actor, reason=reason, action=ActivationAction.ACTIVATE, release_check=check,
    )


@transaction.atomic
def rollback_version(
    *, kb: KnowledgeBase, actor: Actor, reason: str = "", to_version: KnowledgeBaseVersion | None = None
) -> VersionActivation:
    """Switch back to an older READY version (default: the one active before the current)."""
    kb = KnowledgeBase.objects.select_for_update().get(pk=kb.pk)
    current = kb.active_version
    if current is None:
        raise InvalidTransition(_("知识库还没有生效版本，无法回滚。"), code="no_active_version")
    if to_version is None:
        to_version = previous_active_version(kb=kb)
        if to_version is None:
            raise InvalidTransition(
                _("没有可回滚的上一个版本（上一版本不存在或已不是就绪状态）。"),
                code="no_rollback_target",
            )
    if to_version.knowledge_base_id != kb.pk:
        raise ValidationFailed(_("目标版本不属于该知识库。"), code="invalid_version")
    if to_version.number >= current.number:
        raise InvalidTransition(
            _("回滚只能切换到比当前生效版本 v%(n)s 更早的版本。") % {"n": current.number},
            code="not_older_version",
        )
    return _switch_active_version(
        version=to_version, actor=actor, reason=reason, action=ActivationAction.ROLLBACK
    )


def _switch_active_version(
    *, version: KnowledgeBaseVersion, actor: Actor, reason: str, action: str, release_check: dict | None = None
) -> VersionActivation:
    # Lock the knowledge base row first: concurrent switches of one KB serialize here, and the
    # partial unique index stays the last line of defence.
    kb = KnowledgeBase.objects.select_for_update().get(pk=version.knowledge_base_id)
    version = KnowledgeBaseVersion.objects.select_for_update().get(pk=version.pk)
    if version.status != VersionStatus.READY:
        raise InvalidTransition(
            _("版本 v%(n)s 当前状态为「%(s)s」，只有就绪版本可以发布或回滚。")
            % {"n": version.number, "s": version.get_status_display()},
            code="version_not_ready",
        )
    previous = kb.active_version
    try:
        with transaction.atomic():
            if previous is not None:
                # Demote first: the one-ACTIVE index is checked per statement.
                KnowledgeBaseVersion.objects.filter(pk=previous.pk).update(
                    status=VersionStatus.READY
                )
            now = timezone.now()
            KnowledgeBaseVersion.objects.filter(pk=version.pk).update(
                status=VersionStatus.ACTIVE, activated_at=now
            )
    except IntegrityError as exc:
        raise Conflict(_("另一个版本切换正在进行，请稍后重试。"), code="concurrent_activation") from exc
    KnowledgeBase.objects.filter(pk=kb.pk).update(active_version=version, updated_at=now)
    epoch = epochs.bump_epoch(kb_id=kb.pk)
    activation = VersionActivation.objects.create(
        knowledge_base=kb,
        from_version=previous,
        to_version=version,
        action=action,
        actor=_user_or_none(actor),
        reason=reason,
        release_check=release_check or {},
        cache_epoch=epoch,
    )
    events.publish_kb_event(
        kb_id=kb.pk,
        event="activation",
        data={
            "action": action,
            "from": previous.number if previous else None,
            "to": version.number,
            "epoch": epoch,
        },
    )
    return activation


@transaction.atomic
def retire_version(*, version: KnowledgeBaseVersion, actor: Actor) -> KnowledgeBaseVersion:
    """Retire a version that is not active. Documents no retained version holds are purged."""
    # The KB lock first, as uploads and deletions take it: a duplicate upload adding one of
    # these documents to the draft either commits before this check or waits for the purge.
    KnowledgeBase.objects.select_for_update().get(pk=version.knowledge_base_id)
    version = KnowledgeBaseVersion.objects.select_for_update().get(pk=version.pk)
    if version.status == VersionStatus.ACTIVE:
        raise InvalidTransition(
            _("不能退役当前生效的版本，请先发布或回滚到其他版本。"), code="version_active"
        )
    if version.status == VersionStatus.RETIRED:
        return version
    version.status = VersionStatus.RETIRED
    version.retired_at = timezone.now()
    version.save(update_fields=["status", "retired_at"])
    for document in version.documents.all():
        _purge_if_unreachable(document)
    return version


# --- documents ---------------------------------------------------------------------------------


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
) -> list[UploadOutcome]:
    """Validate every file, store them, add them to the KB's draft and queue ingestion.

    Validation happens before anything is stored: one bad file refuses the whole upload with
    per-file errors, so a client never has to guess which part landed. `max_files` replaces
    RAG_MAX_FILES_PER_UPLOAD (a limit for clients) for trusted server-side callers such as
    `manage.py ingest`.
    """
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
            source_tag=source_tag, external_ids=external_ids, titles=titles,
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
            if not upload.size:
                raise FileRejected(_("文件为空。"), code="empty_file")
            if upload.size > settings.RAG_MAX_UPLOAD_BYTES:
                raise FileRejected(
                    _("文件大小 %(size).1f MB 超过上限 %(limit).1f MB。")
                    % {"size": upload.size / 2**20, "limit": settings.RAG_MAX_UPLOAD_BYTES / 2**20},
                    code="file_too_large",
                )
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
) -> list[UploadOutcome]:
    kb = KnowledgeBase.objects.select_for_update().get(pk=kb.pk)
    # Under the KB lock the purge of an earlier document with the same bytes cannot run
    # (`cleanup`): if it deleted a shared file after `_store_original` found it, store again.
    storage = Document._meta.get_field("file").storage
    for item, key in zip(checked, stored_keys, strict=True):
        if key in found_keys and not storage.exists(key):
            _store_original(kb=kb, item=item)
    draft = _draft_for_writing(kb, actor)
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
        given_title = titles[index] if titles and titles[index] else ""
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
            created_by=_user_or_none(actor),
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
    return [UploadOutcome(document=fresh[known[sha].pk], duplicate=duplicate) for sha, duplicate in slots]


def _title_from_name(name: str) -> str:
    stem = name.rsplit("/", 1)[-1]
    if "." in stem:
        stem = stem.rsplit(".", 1)[0]
    return (stem or name)[:300]


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

    transaction.on_commit(lambda: reanalyse_task.enqueue(kb_id=kb_id))


@transaction.atomic
def requeue_documents(*, document_ids: Sequence[int]) -> None:
    """Put documents back in the queue (crash recovery, re-index after a settings change)."""
    queue_documents(document_ids=document_ids)


@transaction.atomic
def retry_document(*, document: Document, actor: Actor) -> Document:
    document = Document.objects.select_for_update().get(pk=document.pk)
    if document.status != DocumentStatus.FAILED:
        raise InvalidTransition(
            _("只有失败的文档可以重试，当前状态为「%(s)s」。") % {"s": document.get_status_display()},
            code="document_not_failed",
        )
    queue_documents(document_ids=[document.pk], fresh_attempts=True)
    document.refresh_from_db()
    return document


@dataclass(frozen=True)
class KnowledgeBaseContents:
    """What deleting a knowledge base removes (the confirmation page shows it)."""

    versions: int
    documents: int
    chunks: int
    faqs: int
    conversations: int


def knowledge_base_contents(*, kb: KnowledgeBase) -> KnowledgeBaseContents:
    return KnowledgeBaseContents(
        versions=kb.versions.count(), documents=kb.documents.count(), chunks=kb.chunks.count(),
        faqs=kb.faqs.count(), conversations=kb.conversations.count(),
    )


@transaction.atomic
def delete_knowledge_base(*, kb: KnowledgeBase, actor: Actor) -> KnowledgeBaseContents:
    """Delete a knowledge base with everything in it: rows now (versions, activation log,
    documents, chunks, assets, FAQs, conversations, traces), then after commit its files and
    its chunk and FAQ vectors. A failed commit removes nothing."""
    kb = KnowledgeBase.objects.select_for_update().get(pk=kb.pk)
    contents = knowledge_base_contents(kb=kb)
    schedule_knowledge_base_purge(kb)
    # The active pointer and the activation log protect versions from a plain cascade.
    KnowledgeBase.objects.filter(pk=kb.pk).update(active_version=None)
    VersionActivation.objects.filter(knowledge_base=kb).delete()
    kb.delete()
    return contents


@dataclass(frozen=True)
class DeletionOutcome:
    removed_from_draft: bool
    purged: bool
    retained_by: tuple[int, ...]


@transaction.atomic
def delete_document(*, document: Document, actor: Actor) -> DeletionOutcome:
    """Remove the document from the next version; purge it once no retained version holds it.

    Published versions are immutable: a document in the active (or another READY) version stays
    there until that version is retired; it leaves the draft at once.
    """
    kb = KnowledgeBase.objects.select_for_update().get(pk=document.knowledge_base_id)
    document = Document.objects.select_for_update().get(pk=document.pk)
    draft = _draft_for_writing(kb, actor)
    in_draft = draft.documents.filter(pk=document.pk).exists()
    if in_draft:
        draft.documents.remove(document)
        # The draft may now hold only READY documents (the removed one was the last pending).
        refresh_readiness_after_commit(version_ids=[draft.pk])
    purged = _purge_if_unreachable(document)
    retained = () if purged else tuple(
        retained_versions_holding(document=document).values_list("number", flat=True)
    )
    return DeletionOutcome(removed_from_draft=in_draft, purged=purged, retained_by=retained)


def _purge_if_unreachable(document: Document) -> bool:
    """Delete a document no retained version holds: rows now, files and vectors after commit."""
    if retained_versions_holding(document=document).exists():
        return False
    schedule_purge(document)
    return True


# --- FAQs --------------------------------------------------------------------------------------


@transaction.atomic
def save_faq(
    *,
    kb: KnowledgeBase,
    question: str,
    answer: str,
    actor: Actor,
    faq: FAQ | None = None,
    similar_questions: Sequence[str] = (),
    source_tag: str = "",
    enabled: bool = True,
) -> FAQ:
    """Create or update a FAQ; the KB's cache epoch moves so no stale FAQ answer is served."""
    question = question.strip()
    similar = _clean_similar_questions(similar_questions, question)
    if not question:
        raise ValidationFailed(_("标准问题不能为空。"), code="invalid_faq")
    if not answer.strip():
        raise ValidationFailed(_("答案不能为空。"), code="invalid_faq")
    duplicate = FAQ.objects.filter(knowledge_base=kb, question=question)
    if faq is not None:
        duplicate = duplicate.exclude(pk=faq.pk)
    if duplicate.exists():
        raise Conflict(_("已存在相同的标准问题。"), code="faq_duplicate")
    if faq is None:
        faq = FAQ(knowledge_base=kb, created_by=_user_or_none(actor))
    faq.question = question
    faq.answer = answer
    faq.similar_questions = similar
    faq.source_tag = source_tag
    faq.enabled = enabled
    faq.save()
    _faq_changed(kb_id=kb.pk, faq_ids=[faq.pk])
    return faq


@transaction.atomic
def delete_faq(*, faq: FAQ, actor: Actor) -> None:
    kb_id, faq_id = faq.knowledge_base_id, faq.pk
    faq.delete()
    _faq_changed(kb_id=kb_id, faq_ids=[faq_id])


@transaction.atomic
def record_faq_hits(*, faq_ids: Sequence[int]) -> int:
    """Count a direct answer by each FAQ (an atomic increment: concurrent answers all count)."""
    ids = [int(i) for i in faq_ids]
    if not ids:
        return 0
    updated = 0
    for faq_id in ids:
        updated += FAQ.objects.filter(pk=faq_id).update(hit_count=F("hit_count") + 1)
    return updated


def _clean_similar_questions(values: Sequence[str], question: str) -> list[str]:
    seen: set[str] = {question}
    cleaned: list[str] = []
    for value in values:
        text = str(value).strip()
        if text and text not in seen:
            seen.add(text)
            cleaned.append(text)
    return cleaned


def _faq_changed(*, kb_id: int, faq_ids: Sequence[int]) -> None:
    epochs.bump_epoch(kb_id=kb_id)
    schedule_faq_reindex(kb_id=kb_id, faq_ids=list(faq_ids))


@transaction.atomic
def invalidate_cache(*, kb: KnowledgeBase, actor: Actor) -> int:
    return epochs.bump_epoch(kb_id=kb.pk)


def _link_hosts_text(entries: Sequence[str]) -> str:
    try:
        return normalise_link_hosts(entries)
    except DjangoValidationError as exc:
        raise ValidationFailed(exc.messages[0], code="invalid_link_host",
                               errors={"link_allowed_hosts": exc.messages}) from exc


def _validate_model(instance) -> None:
    """Model validation as a coded domain error (callers outside forms and serializers, such as
    management commands, would otherwise see Django's ValidationError as a crash)."""
    try:
        instance.full_clean()
    except DjangoValidationError as exc:
        messages = "; ".join(
            f"{field}: {' '.join(errors)}" if field != "__all__" else " ".join(errors)
            for field, errors in exc.message_dict.items()
        )
        raise ValidationFailed(messages, code="invalid_request", errors=exc.message_dict) from exc


def _user_or_none(actor: Actor):
    return actor if actor is not None and getattr(actor, "is_authenticated", False) else None


def _is_superuser(actor: Actor) -> bool:
    # Commands and tasks act without a user (actor None): they are the operator. A user who is
    # not signed in (AnonymousUser) is nobody's operator: a caller that forgot its own login
    # check must fail closed here, not be waved through as the operator.
    if actor is None:
        return True
    user = _user_or_none(actor)
    return user is not None and bool(user.is_superuser)


def _shares_group(actor: Actor, groups: Sequence[Group]) -> bool:
    user = _user_or_none(actor)
    return user is not None and user.groups.filter(pk__in=[group.pk for group in groups]).exists()
