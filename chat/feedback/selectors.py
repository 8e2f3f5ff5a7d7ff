"""Reads of answer feedback. Nothing here writes."""

from __future__ import annotations

import re

from django.db.models import QuerySet
from django.utils.translation import gettext as _

from ragsite.errors import NotFound

from ..contracts import Requester
from ..models import AnswerFeedback, Message, MessageRole, MessageStatus
from ..selectors import readable_conversations

# The id an answer is known by: its message id, or the OpenAI-compatible endpoint's completion id
# ("chatcmpl-<message id>"), so an integrator passes back what that endpoint returned.
MESSAGE_ID = re.compile(r"(?:chatcmpl-)?([1-9][0-9]{0,17})")


def access_answer(*, requester: Requester, message_id: int | str) -> Message:
    """A finished answer in one of the requester's own conversations on a knowledge base they
    may still read, or NotFound: another reader's answer answers exactly as a missing one."""
    match = MESSAGE_ID.fullmatch(str(message_id))
    answer = (
        Message.objects.filter(
            pk=int(match.group(1)), role=MessageRole.ASSISTANT, status=MessageStatus.COMPLETE,
            conversation__in=readable_conversations(requester=requester),
        ).select_related("conversation").first()
        if match is not None else None
    )
    if answer is None:
        raise NotFound(_("回答 %(id)s 不存在或无权访问。") % {"id": message_id}, code="message_not_found")
    return answer


def feedback_of(*, answer: Message) -> AnswerFeedback | None:
    return AnswerFeedback.objects.filter(message=answer).first()


def feedback_for_review() -> QuerySet[AnswerFeedback]:
    """Every feedback row with what the review list shows of it (question, answer, version)."""
    return AnswerFeedback.objects.select_related("knowledge_base", "message", "message__trace", "user")
