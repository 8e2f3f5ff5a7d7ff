"""Writes of the chat app: one owner for conversations, messages, evidence and traces.

A turn is written in two transactions: `start_turn` stores the question before anything slow
happens (so it survives whatever follows); `complete_turn` stores the finished answer, its
evidence and its trace together; `fail_turn` stores an errored or cancelled answer (the text
that was delivered, no evidence) and its trace. FAQ hit counts move after commit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from knowledge.faqs import services as faq_services
from knowledge.models import KnowledgeBase

from .contracts import Requester
from .models import ChatEvidence, Conversation, Message, MessageRole, MessageStatus, QueryTrace, TraceStatus

TITLE_CHARS = 60


@dataclass(frozen=True)
class TraceRecord:
    """Everything a `QueryTrace` row holds besides its links."""

    trace_id: uuid.UUID
    kb_version: int | None
    question: str
    rewritten_query: str = ""
    route: str = ""
    intent: str = ""
    hit_type: str = ""
    confidence_score: float | None = None
    confidence_level: str = ""
    stage_timings: list[dict[str, Any]] = field(default_factory=list)
    first_token_ms: float | None = None
    total_ms: float = 0.0
    cache: dict[str, Any] = field(default_factory=dict)
    degradations: list[str] = field(default_factory=list)
    insufficient_reason: str = ""
    model_name: str = ""
    error_class: str = ""
    error_code: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvidenceRecord:
    route: str
    hit_type: str
    intent: dict[str, Any]
    rewritten_query: str
    citations: list[dict[str, Any]]
    retrieval_results: list[dict[str, Any]]
    retrieval_trace: dict[str, Any]
    answer_confidence: dict[str, Any]


def _owner(requester: Requester) -> dict[str, Any]:
    user = requester.user
    if user is not None and user.is_authenticated:
        return {"user": user, "session_key": ""}
    return {"user": None, "session_key": requester.session_key}


@transaction.atomic
def start_turn(
    *,
    kb: KnowledgeBase,
    requester: Requester,
    question: str,
    conversation: Conversation | None,
    client_id: str = "",
) -> tuple[Conversation, Message]:
    """The conversation (created when new) and the stored user message."""
    if conversation is None:
        conversation = _new_conversation(kb=kb, requester=requester, question=question, client_id=client_id)
    else:
        Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now())
    message = Message.objects.create(
        conversation=conversation, role=MessageRole.USER, content=question, status=MessageStatus.COMPLETE
    )
    return conversation, message


def _new_conversation(*, kb, requester, question, client_id) -> Conversation:
    owner = _owner(requester)
    title = question.strip().splitlines()[0][:TITLE_CHARS] if question.strip() else "…"
    if not client_id or (owner["user"] is None and not owner["session_key"]):
        return Conversation.objects.create(knowledge_base=kb, title=title, **owner)
    try:
        with transaction.atomic():
            return Conversation.objects.create(knowledge_base=kb, title=title, client_id=client_id, **owner)
    except IntegrityError:
        # The same client chat id arrived twice at once: both turns join one conversation.
        return Conversation.objects.get(client_id=client_id, **owner)


@transaction.atomic
def complete_turn(
    *,
    conversation: Conversation,
    answer: str,
    evidence: EvidenceRecord,
    trace: TraceRecord,
    user: Any,
    faq_ids: tuple[int, ...] = (),
) -> Message:
    message = Message.objects.create(
        conversation=conversation, role=MessageRole.ASSISTANT, content=answer,
        status=MessageStatus.COMPLETE, trace_id=trace.trace_id,
    )
    ChatEvidence.objects.create(
        message=message,
        route=evidence.route,
        hit_type=evidence.hit_type,
        intent=evidence.intent,
        rewritten_query=evidence.rewritten_query,
        citations=evidence.citations,
        retrieval_results=evidence.retrieval_results,
        retrieval_trace=evidence.retrieval_trace,
        answer_confidence=evidence.answer_confidence,
    )
    # The full retrieval trace is stored once, on the evidence (QueryTrace.full_details reads it).
    _write_trace(conversation=conversation, message=message, trace=trace, user=user,
                 status=TraceStatus.COMPLETED, details={})
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now())
    if faq_ids:
        ids = list(faq_ids)
        transaction.on_commit(lambda: faq_services.record_faq_hits(faq_ids=ids))
    return message


@transaction.atomic
def fail_turn(
    *,
    conversation: Conversation,
    delivered_text: str,
    trace: TraceRecord,
    user: Any,
    cancelled: bool,
) -> Message:
    """An errored or cancelled answer: what the client already received, and no evidence."""
    message = Message.objects.create(
        conversation=conversation, role=MessageRole.ASSISTANT, content=delivered_text,
        status=MessageStatus.CANCELLED if cancelled else MessageStatus.ERROR,
        error_code=trace.error_code, trace_id=trace.trace_id,
    )
    _write_trace(
        conversation=conversation, message=message, trace=trace, user=user,
        status=TraceStatus.CANCELLED if cancelled else TraceStatus.FAILED,
    )
    return message


def _write_trace(
    *, conversation: Conversation, message: Message, trace: TraceRecord, user, status: str, details=None
) -> None:
    QueryTrace.objects.create(
        trace_id=trace.trace_id,
        knowledge_base_id=conversation.knowledge_base_id,
        kb_version=trace.kb_version,
        conversation=conversation,
        assistant_message=message,
        user=user if user is not None and user.is_authenticated else None,
        question=trace.question,
        rewritten_query=trace.rewritten_query,
        status=status,
        route=trace.route,
        intent=trace.intent,
        hit_type=trace.hit_type,
        confidence_score=trace.confidence_score,
        confidence_level=trace.confidence_level,
        stage_timings=trace.stage_timings,
        first_token_ms=trace.first_token_ms,
        total_ms=trace.total_ms,
        cache=trace.cache,
        degradations=trace.degradations,
        insufficient_reason=trace.insufficient_reason,
        model_name=trace.model_name,
        error_class=trace.error_class,
        error_code=trace.error_code,
        details=trace.details if details is None else details,
    )
