"""Reads of answer feedback. Nothing here writes."""

from __future__ import annotations

import re

from django.db.models import QuerySet
from django.utils.translation import gettext as _

from ragsite.errors import NotFound

from ..contracts import Requester
from ..models import AnswerFeedback, Message, MessageRole, MessageStatus
from ..selectors import readable_conversations

# The id an answer is known by: its message id, or the OpenAI-compatible endpoint's completion id,
# "chatcmpl-<message id>" for a whole answer and "chatcmpl-<trace id>" for a streamed one (its
# message is stored only once the text is complete), so an integrator passes back what it got.
MESSAGE_ID = re.compile(r"(?:chatcmpl-)?([1-9][0-9]{0,17})")
TRACE_ID = re.compile(r"chatcmpl-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})", re.I)


def access_answer(*, requester: Requester, message_id: int | str) -> Message:
    """A finished answer in one of the requester's own conversations on a knowledge base they
    may still read, or NotFound: another reader's answer answers exactly as a missing one."""
    by_message, by_trace = MESSAGE_ID.fullmatch(str(message_id)), TRACE_ID.fullmatch(str(message_id))
    lookup = ({"pk": int(by_message.group(1))} if by_message is not None
              else {"trace_id": by_trace.group(1)} if by_trace is not None else None)
    answer = (
        Message.objects.filter(
            **lookup, role=MessageRole.ASSISTANT, status=MessageStatus.COMPLETE,
            conversation__in=readable_conversations(requester=requester),
        ).select_related("conversation").first()
        if lookup is not None else None
    )
    if answer is None:
        raise NotFound(_("回答 %(id)s 不存在或无权访问。") % {"id": message_id}, code="message_not_found")
    return answer


def feedback_of(*, answer: Message) -> AnswerFeedback | None:
    return AnswerFeedback.objects.filter(message=answer).first()


def feedback_for_review() -> QuerySet[AnswerFeedback]:
    """Every feedback row with what the review list shows of it (question, answer, version)."""
    return AnswerFeedback.objects.select_related("knowledge_base", "message", "message__trace", "user")
