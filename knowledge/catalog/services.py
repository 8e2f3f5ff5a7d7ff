"""Knowledge bases and their versions: the one owner of the version state machine.

BUILDING → READY is `readiness` (it follows the documents' ingestion); READY → ACTIVE,
ACTIVE → READY and → RETIRED are here, as is every edit of a draft's documents (deleting a
document takes it out of the draft). Every public function takes keyword-only arguments, runs in
one transaction, and defers side effects (purging files and vectors, clearing caches, publishing
events) to `transaction.on_commit`, so a rolled-back write leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured, ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.translation import gettext as _

from engines.providers import embedding_space
from ragsite.errors import Conflict, InvalidTransition, ValidationFailed

from knowledge import audit, epochs, events
from knowledge.actors import Actor, acts_as_superuser, shares_group, user_or_none, validate_model
from knowledge.catalog.readiness import refresh_readiness_after_commit
from knowledge.catalog.release_gate import blocking_reason, release_gate
from knowledge.catalog.selectors import previous_active_version, retained_versions_holding
from knowledge.cleanup import schedule_knowledge_base_purge, schedule_purge
from knowledge.links import normalise_link_hosts
from knowledge.models import (
    ActivationAction,
    AuditAction,
    CacheNamespace,
    Document,
    KnowledgeBase,
    KnowledgeBaseVersion,
    VersionActivation,
    VersionStatus,
    Visibility,
)

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
    if not acts_as_superuser(actor) and not shares_group(actor, publisher_groups):
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
        created_by=user_or_none(actor),
    )
    validate_model(kb)
    kb.save()
    if allowed_groups:
        kb.allowed_groups.set(allowed_groups)
    kb.editor_groups.set(editor_groups)
    kb.publisher_groups.set(publisher_groups)
    CacheNamespace.objects.create(scope=epochs.scope_for_kb(kb.pk), knowledge_base=kb, cache_epoch=1)
    audit.record(kb=kb, actor=actor, action=AuditAction.KB_CREATED, target=kb.name)
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
    web_search_enabled: bool | None = None,
) -> KnowledgeBase:
    """Edit presentation, access settings, the dictionary, the release-check limit (None:
    show the check, never block), the hosts whose links stay clickable in answers (they
    apply to answers given from then on; stored answers keep the text they were given with)
    and whether questions also search the web (where the deployment configured a search).
    The embedding space and the text analysis never change after
    creation. A new dictionary applies to questions at once and to indexed chunks after
    `schedule_reanalysis`."""
    kb = KnowledgeBase.objects.select_for_update().get(pk=kb.pk)
    before = _settings_of(kb)
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
    if web_search_enabled is not None:
        kb.web_search_enabled = web_search_enabled
    validate_model(kb)
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
    after = _settings_of(kb)
    changed = [name for name in after if after[name] != before[name]]
    if changed:
        # A form saves every field it shows: the entry names the settings that changed.
        labels = "、".join(str(KnowledgeBase._meta.get_field(name).verbose_name) for name in changed)
        audit.record(kb=kb, actor=actor, action=AuditAction.KB_UPDATED, target=labels)
    return kb


_AUDITED_SETTINGS = ("name", "description", "visibility", "support_contact", "custom_terms",
                     "release_max_regression_points", "link_allowed_hosts", "web_search_enabled")
_AUDITED_GROUPS = ("allowed_groups", "editor_groups", "publisher_groups")


def _settings_of(kb: KnowledgeBase) -> dict[str, object]:
    values: dict[str, object] = {name: getattr(kb, name) for name in _AUDITED_SETTINGS}
    for name in _AUDITED_GROUPS:
        values[name] = frozenset(getattr(kb, name).values_list("pk", flat=True))
    return values


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
        created_by=user_or_none(actor),
    )
    if base is not None:
        version.documents.set(base.documents.all())
    audit.record(kb=kb, actor=actor, action=AuditAction.DRAFT_CREATED, target=f"v{version.number}")
    return version


def draft_for_writing(kb: KnowledgeBase, actor: Actor) -> KnowledgeBaseVersion:
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
        actor=user_or_none(actor),
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
    audit.record(kb=version.knowledge_base, actor=actor, action=AuditAction.VERSION_RETIRED, target=f"v{version.number}")
    for document in version.documents.all():
        _purge_if_unreachable(document)
    return version


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
    audit.record(kb=kb, actor=actor, action=AuditAction.KB_DELETED, target=kb.name)
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
    draft = draft_for_writing(kb, actor)
    in_draft = draft.documents.filter(pk=document.pk).exists()
    if in_draft:
        draft.documents.remove(document)
        # The draft may now hold only READY documents (the removed one was the last pending).
        refresh_readiness_after_commit(version_ids=[draft.pk])
    purged = _purge_if_unreachable(document)
    retained = () if purged else tuple(
        retained_versions_holding(document=document).values_list("number", flat=True)
    )
    audit.record(kb=kb, actor=actor, action=AuditAction.DOCUMENT_DELETED, target=document.title)
    return DeletionOutcome(removed_from_draft=in_draft, purged=purged, retained_by=retained)


def _purge_if_unreachable(document: Document) -> bool:
    """Delete a document no retained version holds: rows now, files and vectors after commit."""
    if retained_versions_holding(document=document).exists():
        return False
    schedule_purge(document)
    return True


@transaction.atomic
def invalidate_cache(*, kb: KnowledgeBase, actor: Actor) -> int:
    audit.record(kb=kb, actor=actor, action=AuditAction.CACHE_CLEARED)
    return epochs.bump_epoch(kb_id=kb.pk)


def _link_hosts_text(entries: Sequence[str]) -> str:
    try:
        return normalise_link_hosts(entries)
    except DjangoValidationError as exc:
        raise ValidationFailed(exc.messages[0], code="invalid_link_host",
                               errors={"link_allowed_hosts": exc.messages}) from exc


