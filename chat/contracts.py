"""Frozen contracts of the answering pipeline, shared by its transports (SSE, JSON, WebSocket),
persistence and evaluation. Everything serialises with `as_dict()` to what is stored as evidence
and sent to clients.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ragsite.errors import DomainError

Route = Literal["direct_answer", "faq_exact", "retrieval"]
HitType = Literal["direct_answer", "faq_exact", "faq_direct", "rag", "insufficient_context"]

ROUTES: tuple[str, ...] = ("direct_answer", "faq_exact", "retrieval")
HIT_TYPES: tuple[str, ...] = ("direct_answer", "faq_exact", "faq_direct", "rag", "insufficient_context")


@dataclass(frozen=True)
class ChatOptions:
    """Retrieval options of one question; None means the rules file's default."""

    top_k: int | None = None
    mode: str | None = None
    candidate_k: int | None = None
    enable_query_rewrite: bool | None = None
    enable_rerank: bool | None = None
    enable_parent_expansion: bool | None = None
    document_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ChatQuery:
    """One question as a transport received it, before any access check."""

    knowledge_base_id: str  # slug
    question: str
    conversation_id: uuid.UUID | None = None
    client_id: str = ""  # an AI SDK chat id, mapped to a conversation of this owner
    options: ChatOptions = field(default_factory=ChatOptions)


@dataclass(frozen=True)
class Requester:
    """Who asks: a user (possibly anonymous) and, for anonymous readers, their session."""

    user: Any
    session_key: str = ""


@dataclass(frozen=True)
class IntentResult:
    intent: str  # GREETING, HUMAN_SERVICE, OUT_OF_SCOPE, FAQ_QUERY, KNOWLEDGE_QUERY, FOLLOW_UP
    rule_score: float
    confidence: float  # the decision score
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SupportSpan:
    """The sentence that supports an answer line, as a span of one chunk's own text, and the
    same span inside the citation's `text` (what the reader sees)."""

    line: int  # 0-based answer line that cites it; -1 when chosen for the question itself
    chunk_id: int | None
    start: int  # in the chunk's content
    end: int
    text_start: int  # in Citation.text
    text_end: int
    text: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Citation:
    """`[来源 N]` of an answer: built from retrieval results, never parsed from model text."""

    number: int
    kind: Literal["chunk", "faq"]
    title: str  # document title, or the FAQ's standard question
    text: str  # what the reader sees: the context text given to the model
    score: float  # retrieval ranking score
    relevance: float  # lexical coverage of the question (the relevance floor's measure)
    chunk_id: int | None = None
    document_id: int | None = None
    faq_id: int | None = None
    locator: dict[str, Any] = field(default_factory=dict)
    locator_label: str = ""
    heading_path: tuple[str, ...] = ()
    content_type: str = "text"
    context_chunk_ids: tuple[int, ...] = ()
    preview_url: str | None = None
    assets: tuple[dict[str, Any], ...] = ()
    spans: tuple[SupportSpan, ...] = ()
    cited: bool = False  # the answer cites it inline

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["heading_path"] = list(self.heading_path)
        data["context_chunk_ids"] = list(self.context_chunk_ids)
        data["assets"] = [dict(a) for a in self.assets]
        data["spans"] = [s.as_dict() for s in self.spans]
        return data


@dataclass(frozen=True)
class TurnResult:
    """A finished turn: what the client shows and what was stored."""

    trace_id: uuid.UUID
    conversation_id: uuid.UUID
    user_message_id: int
    assistant_message_id: int
    answer: str
    route: str
    hit_type: str
    intent: IntentResult
    citations: tuple[Citation, ...]
    answer_confidence: dict[str, Any]
    retrieval: dict[str, Any]  # plan, variants, stage timings, first token, cache, …
    kb_version: int | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "trace_id": str(self.trace_id),
            "conversation_id": str(self.conversation_id),
            "user_message_id": self.user_message_id,
            "message_id": self.assistant_message_id,
            "answer": self.answer,
            "route": self.route,
            "hit_type": self.hit_type,
            "intent": self.intent.as_dict(),
            "citations": [c.as_dict() for c in self.citations],
            "answer_confidence": self.answer_confidence,
            "retrieval": self.retrieval,
            "kb_version": self.kb_version,
        }


# --- errors -------------------------------------------------------------------------------------


class ChatError(DomainError):
    """A turn that cannot start or could not finish; `message` is safe to show to anyone."""

    code = "chat_error"
    http_status = 500

    def __init__(self, message: str, *, code: str | None = None, http_status: int | None = None) -> None:
        super().__init__(message, code=code)
        if http_status is not None:
            self.http_status = http_status


class GenerationFailed(ChatError):
    """The model failed after the answer had started streaming."""

    code = "generation_failed"
    http_status = 502


class TurnCancelled(Exception):
    """The client went away; the turn is stored as cancelled."""
