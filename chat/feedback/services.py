"""Writes of answer feedback: one row per answer, given or changed by its reader, or withdrawn."""

from __future__ import annotations

from django.utils.translation import gettext as _

from ragsite.errors import ValidationFailed

from ..contracts import Requester
from ..models import AnswerFeedback, FeedbackVerdict, QueryTrace
from .selectors import access_answer

REASON_MAX_CHARS = 1000


def give_feedback(*, requester: Requester, message_id: int | str, verdict: str, reason: str = "") -> AnswerFeedback:
    """The requester's verdict on one of their answers, replacing the one they gave before (its
    reason too: a 👍 after a 👎 keeps no stale complaint)."""
    if verdict not in FeedbackVerdict.values:
        raise ValidationFailed(_("评价只能是 up（有用）或 down（没用）。"), code="invalid_verdict")
    reason = (reason or "").strip()
    if len(reason) > REASON_MAX_CHARS:
        raise ValidationFailed(_("原因最多 %(n)s 个字。") % {"n": REASON_MAX_CHARS}, code="reason_too_long")
    answer = access_answer(requester=requester, message_id=message_id)
    trace = QueryTrace.objects.filter(assistant_message=answer).only("kb_version").first()
    user = requester.user if requester.user is not None and requester.user.is_authenticated else None
    values = {"verdict": verdict, "reason": reason, "user": user, "session_key": requester.session_key}
    # One transaction that locks the row it finds; when a parallel first feedback on the same
    # answer wins the insert (the message is unique), the loser reads that row and updates it.
    feedback, _created = AnswerFeedback.objects.update_or_create(
        message=answer, defaults=values,
        create_defaults={**values, "knowledge_base_id": answer.conversation.knowledge_base_id,
                         "kb_version": trace.kb_version if trace is not None else None},
    )
    return feedback


def withdraw_feedback(*, requester: Requester, message_id: int | str) -> None:
    """Take back the requester's verdict on one of their answers (nothing to take back is fine)."""
    answer = access_answer(requester=requester, message_id=message_id)
    AnswerFeedback.objects.filter(message=answer).delete()
