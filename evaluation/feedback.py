"""A reader's 👎 becomes a question of the knowledge base's default evaluation set, so the next
release check measures it: staff say which chunk holds the right answer, or that the documents
cannot answer it.

    👎 on an answer (chat.feedback) → staff pick the right chunk, or "unanswerable"
        → save_feedback_case: the case `feedback-<id>` in the default set (created when the
          knowledge base has none), the set's cases marked changed, an audit row
        → after commit: the release check of every READY draft runs again with the case
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from chat.models import AnswerFeedback, FeedbackVerdict, QueryTrace, TraceStatus
from chat.pipeline.rules import load_rules
from knowledge import audit
from knowledge.access import Role, require_role
from knowledge.models import AuditAction, Chunk, KnowledgeBaseVersion, VersionStatus
from ragsite.errors import ValidationFailed

from .models import EvalCase, EvalSet
from .release import default_eval_set, release_check_task

FEEDBACK_SET_NAME = "用户反馈"
CATEGORY = "feedback"


@dataclass(frozen=True)
class FeedbackCase:
    case: EvalCase
    created: bool  # a new case (else the feedback's case was replaced)
    set_created: bool  # the knowledge base had no default set: one was made for it


def case_key(feedback: AnswerFeedback) -> str:
    return f"feedback-{feedback.pk}"


@transaction.atomic
def save_feedback_case(
    *, feedback: AnswerFeedback, actor, chunk_id: int | None, answers: Sequence[str] = (),
) -> FeedbackCase:
    """The evaluation case of a 👎: its question (with the conversation's earlier questions, so a
    follow-up is judged in its context), the chunk staff marked as right — None: the documents
    cannot answer it — and optional reference answers. Saving the same feedback again replaces
    its case."""
    kb = feedback.knowledge_base
    require_role(user=actor, kb=kb, role=Role.EDITOR)
    if feedback.verdict != FeedbackVerdict.DOWN:
        raise ValidationFailed(_("只有评价为“没用”的回答可以转为评测问题。"), code="feedback_not_down")
    trace = QueryTrace.objects.filter(assistant_message_id=feedback.message_id).first()
    if trace is None:
        raise ValidationFailed(_("这条回答没有问答追踪，无法取得原问题。"), code="feedback_without_trace")
    chunk = None
    if chunk_id is not None:
        chunk = Chunk.objects.select_related("document").filter(pk=chunk_id, knowledge_base=kb).first()
        if chunk is None:
            raise ValidationFailed(_("分块 %(id)s 不属于知识库「%(kb)s」。") % {"id": chunk_id, "kb": kb.name},
                                   code="chunk_not_in_kb")
    eval_set = default_eval_set(kb)
    set_created = eval_set is None
    if set_created:
        eval_set, _made = EvalSet.objects.get_or_create(
            knowledge_base=kb, name=FEEDBACK_SET_NAME,
            defaults={"description": _("由读者评价为“没用”的回答整理而成。"), "created_by": actor},
        )
        eval_set.is_default = True
    document = chunk.document if chunk is not None else None
    values = {
        "question": trace.question,
        "expected_chunks": [chunk.pk] if chunk is not None else [],
        # The document too: a reader of the set sees which document should answer, and the
        # chunk's id outlives neither a re-ingestion nor a replacement of the document.
        "expected_documents": [document.external_id or document.title or document.original_name] if document else [],
        "answers": [a.strip() for a in answers if a.strip()],
        "answerable": chunk is not None,
        "category": CATEGORY,
        "history": _earlier_questions(trace),
        "feedback": feedback,
    }
    last = eval_set.cases.order_by("-ordinal").values_list("ordinal", flat=True).first()
    case, created = EvalCase.objects.update_or_create(
        eval_set=eval_set, key=case_key(feedback), defaults=values,
        create_defaults={**values, "ordinal": (last or 0) + 1},
    )
    eval_set.cases_changed_at = timezone.now()
    eval_set.save()
    audit.record(kb=kb, actor=actor, action=AuditAction.FEEDBACK_CASE_SAVED,
                 target=f"{eval_set.name} · {case.key}: {trace.question}")
    drafts = list(KnowledgeBaseVersion.objects.filter(knowledge_base=kb, status=VersionStatus.READY).values_list("pk", flat=True))
    # The drafts' checks measured the set without this case: they run again with it.
    for version_id in drafts:
        transaction.on_commit(lambda version_id=version_id: release_check_task.enqueue(version_id=version_id))
    return FeedbackCase(case=case, created=created, set_created=set_created)


def _earlier_questions(trace: QueryTrace) -> list[str]:
    """The questions asked before this one in its conversation, as many as a follow-up sees."""
    if trace.conversation_id is None:
        return []
    earlier = (
        QueryTrace.objects.filter(conversation_id=trace.conversation_id, status=TraceStatus.COMPLETED,
                                  created_at__lt=trace.created_at)
        .order_by("-created_at", "-id").values_list("question", flat=True)[: load_rules().follow_up.history_turns]
    )
    return list(reversed(earlier))
