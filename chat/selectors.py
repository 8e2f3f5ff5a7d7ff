"""Reads of the chat app. Nothing here writes."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet
from django.utils.timezone import localtime

from knowledge.access import readable_knowledge_bases

from .contracts import Requester
from .models import AnswerFeedback, Conversation, Message, MessageRole, MessageStatus, QueryTrace, TraceStatus
from .pipeline.preparation import HistoryTurn


def owned_conversations(*, requester: Requester) -> QuerySet[Conversation]:
    user = requester.user
    if user is not None and user.is_authenticated:
        return Conversation.objects.filter(user=user)
    if requester.session_key:
        return Conversation.objects.filter(user__isnull=True, session_key=requester.session_key)
    return Conversation.objects.none()


def conversation_by_client_id(*, requester: Requester, kb_id: int, client_id: str) -> Conversation | None:
    if not client_id:
        return None
    return owned_conversations(requester=requester).filter(knowledge_base_id=kb_id, client_id=client_id).first()


def recent_turns(*, conversation_id: uuid.UUID, limit: int) -> tuple[HistoryTurn, ...]:
    """The last `limit` finished question/answer pairs, oldest first."""
    if limit <= 0:
        return ()
    traces = (
        QueryTrace.objects.filter(
            conversation_id=conversation_id, status=TraceStatus.COMPLETED, assistant_message__isnull=False
        )
        .select_related("assistant_message")
        .order_by("-created_at", "-id")[:limit]
    )
    return tuple(
        HistoryTurn(
            question=t.question,
            answer=t.assistant_message.content,
            retrieval_query=t.rewritten_query or t.question,
        )
        for t in reversed(list(traces))
    )


def readable_conversations(*, requester: Requester) -> QuerySet[Conversation]:
    """The requester's own conversations on knowledge bases they may still read: losing a
    knowledge base takes its conversations out of sight with it."""
    return owned_conversations(requester=requester).filter(knowledge_base__in=readable_knowledge_bases(requester.user))


def conversation_summaries(*, requester: Requester, kb_slug: str | None = None) -> QuerySet[Conversation]:
    conversations = readable_conversations(requester=requester).select_related("knowledge_base")
    if kb_slug:
        conversations = conversations.filter(knowledge_base__slug=kb_slug)
    return conversations.order_by("-updated_at")


def feedback_dict(feedback: AnswerFeedback) -> dict[str, Any]:
    return {
        "message_id": feedback.message_id,
        "verdict": feedback.verdict,
        "reason": feedback.reason,
        "updated_at": localtime(feedback.updated_at).isoformat(),
    }


def conversation_messages(*, conversation: Conversation) -> list[dict[str, Any]]:
    """Messages in order, each assistant answer with the evidence it was shown with."""
    messages = (
        Message.objects.filter(conversation=conversation)
        .select_related("evidence", "feedback")
        .order_by("created_at", "id")
    )
    out = []
    for message in messages:
        item: dict[str, Any] = {
            "id": message.pk,
            "role": message.role,
            "content": message.content,
            "status": message.status,
            "error_code": message.error_code,
            "trace_id": str(message.trace_id) if message.trace_id else None,
            "created_at": localtime(message.created_at).isoformat(),
            "evidence": None,
            "feedback": None,
        }
        evidence = getattr(message, "evidence", None) if message.role == MessageRole.ASSISTANT else None
        if evidence is not None and message.status == MessageStatus.COMPLETE:
            item["evidence"] = {
                "route": evidence.route,
                "hit_type": evidence.hit_type,
                "intent": evidence.intent,
                "rewritten_query": evidence.rewritten_query,
                "citations": evidence.citations,
                "retrieval_results": evidence.retrieval_results,
                "retrieval_trace": evidence.retrieval_trace,
                "answer_confidence": evidence.answer_confidence,
                "clarify": (evidence.retrieval_trace or {}).get("clarify"),
            }
        feedback = getattr(message, "feedback", None) if message.role == MessageRole.ASSISTANT else None
        if feedback is not None:
            item["feedback"] = feedback_dict(feedback)
        out.append(item)
    return out
