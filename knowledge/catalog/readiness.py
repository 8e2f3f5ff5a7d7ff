"""When a draft becomes READY: exactly when it holds documents and all of them are READY.

The one place that promotes a version BUILDING → READY, whoever finished its last document
(a worker, a deletion, staff pressing "标记为就绪").
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from ragsite.errors import InvalidTransition

from knowledge import events
from knowledge.signals import version_ready
from knowledge.models import DocumentStatus, KnowledgeBaseVersion, VersionStatus
from knowledge.catalog.selectors import unready_documents


@transaction.atomic
def mark_version_ready(*, version: KnowledgeBaseVersion) -> KnowledgeBaseVersion:
    """BUILDING → READY once it holds at least one document and all of them are READY."""
    version = KnowledgeBaseVersion.objects.select_for_update().get(pk=version.pk)
    if version.status == VersionStatus.READY:
        return version
    if version.status != VersionStatus.BUILDING:
        raise InvalidTransition(
            _("版本 v%(n)s 当前状态为「%(s)s」，只有构建中的版本可以标记为就绪。")
            % {"n": version.number, "s": version.get_status_display()}
        )
    problem = _readiness_problem(version)
    if problem is not None:
        raise problem
    version.status = VersionStatus.READY
    version.ready_at = timezone.now()
    version.save(update_fields=["status", "ready_at"])
    events.publish_kb_event(
        kb_id=version.knowledge_base_id,
        event="version",
        data={"version": version.number, "status": version.status},
    )
    version_id = version.pk
    transaction.on_commit(lambda: version_ready.send(sender=KnowledgeBaseVersion, version_id=version_id))
    return version


def _readiness_problem(version: KnowledgeBaseVersion) -> InvalidTransition | None:
    """Why the version cannot become READY yet, or None when it can."""
    if not version.documents.exists():
        return InvalidTransition(_("版本中没有文档，不能标记为就绪。"), code="version_empty")
    unready = unready_documents(version=version)
    # Called each time a document finishes: read five titles, not every pending row.
    first = list(unready.values_list("title", "status")[:5])
    if first:
        names = "、".join(f"{title}（{DocumentStatus(status).label}）" for title, status in first)
        return InvalidTransition(
            _("还有 %(count)d 个文档未就绪：%(names)s") % {"count": unready.count(), "names": names},
            code="documents_not_ready",
        )
    return None


def refresh_version_readiness(*, version_ids: Sequence[int]) -> list[int]:
    """Promote the BUILDING versions among these whose documents are now all READY; returns the
    promoted ids. "Not ready yet" is an answer, never an error.

    Each version is re-evaluated in its own transaction under its row lock, and callers call
    this after their own change has committed (a document finished, a document left the draft):
    of two workers finishing a draft's last two documents at once, whichever checks last sees
    both documents READY, so a draft cannot stay BUILDING with every document ready.
    """
    promoted = []
    for version_id in version_ids:
        # Uploads and deletions lock the draft row too (`_draft_for_writing`), so membership
        # cannot change between this check and the promotion.
        with transaction.atomic():
            version = KnowledgeBaseVersion.objects.select_for_update().filter(pk=version_id).first()
            if version is None or version.status != VersionStatus.BUILDING:
                continue
            if unready_documents(version=version).exists():
                # Not ready yet: stop at the first pending row instead of counting all of them
                # (this runs after every batch; counting made a large import quadratic).
                continue
            try:
                mark_version_ready(version=version)
            except InvalidTransition:
                continue  # not ready yet: the finish of the last pending document promotes it
            promoted.append(version_id)
    return promoted


def refresh_readiness_after_commit(*, version_ids: Sequence[int]) -> None:
    ids = list(version_ids)
    transaction.on_commit(lambda: refresh_version_readiness(version_ids=ids))
