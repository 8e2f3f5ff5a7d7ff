"""Curated questions and answers: each write moves the knowledge base's cache version so no
stale answer is served, and re-indexes the FAQ's vectors after commit.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.db.models import F
from django.utils.translation import gettext as _

from ragsite.errors import Conflict, ValidationFailed

from knowledge import audit, epochs
from knowledge.actors import Actor, user_or_none
from knowledge.faqs.index import schedule_faq_reindex
from knowledge.models import FAQ, AuditAction, KnowledgeBase


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
    action = AuditAction.FAQ_UPDATED if faq is not None else AuditAction.FAQ_CREATED
    if faq is None:
        faq = FAQ(knowledge_base=kb, created_by=user_or_none(actor))
    faq.question = question
    faq.answer = answer
    faq.similar_questions = similar
    faq.source_tag = source_tag
    faq.enabled = enabled
    faq.save()
    _faq_changed(kb_id=kb.pk, faq_ids=[faq.pk])
    audit.record(kb=kb, actor=actor, action=action, target=question)
    return faq


@transaction.atomic
def delete_faq(*, faq: FAQ, actor: Actor) -> None:
    kb_id, faq_id = faq.knowledge_base_id, faq.pk
    audit.record(kb=faq.knowledge_base, actor=actor, action=AuditAction.FAQ_DELETED, target=faq.question)
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

