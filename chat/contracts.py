"""Frozen contracts of the answering pipeline, shared by its transports (SSE, JSON, WebSocket),
persistence and evaluation. Everything serialises with `as_dict()` to what is stored as evidence
and sent to clients.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal

from django.utils.translation import gettext, pgettext

from ragsite.errors import DomainError
from retrieval.contracts import MetadataFilter


class LabelledEnum(StrEnum):
    """A code with the words staff read for it (`label`, in the active language)."""

    @property
    def label(self) -> str:
        raise NotImplementedError

    @classmethod
    def label_of(cls, value: str) -> str:
        """The label of a stored value; one no member has (an older or newer release wrote it)
        stays as it is, an empty one reads "—"."""
        try:
            return cls(value).label
        except ValueError:
            return value or "—"


class Route(LabelledEnum):
    """What the system does with a question (stage 1)."""

    DIRECT_ANSWER = "direct_answer"
    FAQ_EXACT = "faq_exact"
    RETRIEVAL = "retrieval"

    @property
    def label(self) -> str:
        return {
            Route.DIRECT_ANSWER: gettext("直接回答"),
            Route.FAQ_EXACT: gettext("FAQ 精确匹配"),
            Route.RETRIEVAL: gettext("检索"),
        }[self]


class HitType(LabelledEnum):
    """What the answer was made from."""

    DIRECT_ANSWER = "direct_answer"
    FAQ_EXACT = "faq_exact"
    FAQ_DIRECT = "faq_direct"
    RAG = "rag"
    INSUFFICIENT_CONTEXT = "insufficient_context"
    # Asked back which item is meant: neither an answer nor a decline.
    CLARIFY = "clarify"

    @property
    def label(self) -> str:
        return {
            HitType.DIRECT_ANSWER: gettext("直接回答"),
            HitType.FAQ_EXACT: gettext("FAQ 精确命中"),
            HitType.FAQ_DIRECT: gettext("FAQ 直答"),
            HitType.RAG: gettext("文档问答"),
            HitType.INSUFFICIENT_CONTEXT: gettext("信息不足"),
            HitType.CLARIFY: gettext("反问确认"),
        }[self]


class Intent(LabelledEnum):
    """What a question asks for (`IntentResult.intent`); direct-answer rules name theirs in the
    rules file."""

    GREETING = "GREETING"
    HUMAN_SERVICE = "HUMAN_SERVICE"
    OUT_OF_SCOPE = "OUT_OF_SCOPE"
    FAQ_QUERY = "FAQ_QUERY"
    KNOWLEDGE_QUERY = "KNOWLEDGE_QUERY"
    FOLLOW_UP = "FOLLOW_UP"

    @property
    def label(self) -> str:
        return {
            Intent.GREETING: gettext("问候"),
            Intent.HUMAN_SERVICE: gettext("找人工服务"),
            Intent.OUT_OF_SCOPE: gettext("超出知识库范围"),
            Intent.FAQ_QUERY: gettext("FAQ 问题"),
            Intent.KNOWLEDGE_QUERY: gettext("知识查询"),
            Intent.FOLLOW_UP: gettext("追问"),
        }[self]


class ConfidenceLevel(LabelledEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @classmethod
    def of(cls, score: float, *, high: float, medium: float) -> ConfidenceLevel:
        if score >= high:
            return cls.HIGH
        if score >= medium:
            return cls.MEDIUM
        return cls.LOW

    @property
    def label(self) -> str:
        # A context of its own: "高" alone is also the image height field's label.
        return {
            ConfidenceLevel.HIGH: pgettext("confidence", "高"),
            ConfidenceLevel.MEDIUM: pgettext("confidence", "中"),
            ConfidenceLevel.LOW: pgettext("confidence", "低"),
        }[self]


class VerificationStatus(LabelledEnum):
    VERIFIED = "verified"
    PARTIAL = "partial"
    FAILED = "failed"
    NOT_APPLICABLE = "not_applicable"

    @property
    def label(self) -> str:
        return {
            VerificationStatus.VERIFIED: gettext("通过"),
            VerificationStatus.PARTIAL: gettext("部分通过"),
            VerificationStatus.FAILED: gettext("未通过"),
            VerificationStatus.NOT_APPLICABLE: gettext("不适用"),
        }[self]


ROUTES: tuple[Route, ...] = tuple(Route)
HIT_TYPES: tuple[HitType, ...] = tuple(HitType)


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
    # Conditions on the documents' metadata (`retrieval.filters`), passed to document retrieval.
    filters: tuple[MetadataFilter, ...] = ()
    enable_hyde: bool | None = None


@dataclass(frozen=True)
class ChatQuery:
    """One question as a transport received it, before any access check."""

    knowledge_base_id: str  # slug: the knowledge base the conversation belongs to
    question: str
    conversation_id: uuid.UUID | None = None
    client_id: str = ""  # an AI SDK chat id, mapped to a conversation of this owner
    options: ChatOptions = field(default_factory=ChatOptions)
    # More knowledge bases (slugs) the question reads, each access-checked like the first:
    # their evidence competes with `knowledge_base_id`'s in one ranking.
    also_knowledge_base_ids: tuple[str, ...] = ()
    # The items the asker chose from a clarifying question: the question is about them.
    item_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class ClarifyChoice:
    item_id: int
    name: str

    def as_dict(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "name": self.name}


@dataclass(frozen=True)
class Clarification:
    """A clarifying question: the question asked, and the items to choose from. Asking the
    same question again with one chosen (`ChatQuery.item_ids`) answers it."""

    question: str
    mention: str  # the words of the question that fit several items ("星河路由器")
    choices: tuple[ClarifyChoice, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"question": self.question, "mention": self.mention, "choices": [c.as_dict() for c in self.choices]}


@dataclass(frozen=True)
class Requester:
    """Who asks: a user (possibly anonymous) and, for anonymous readers, their session."""

    user: Any
    session_key: str = ""


@dataclass(frozen=True)
class IntentResult:
    intent: str  # an `Intent` value
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
    # "web": a page a web search found, not the knowledge base's content (no chunk, no document)
    kind: Literal["chunk", "faq", "web"]
    title: str  # document title, the FAQ's standard question, or the web page's title
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
    knowledge_base: str = ""  # the slug of the knowledge base the source belongs to
    knowledge_base_name: str = ""
    # A web source's page: shown as a link the reader may open, never fetched by the server or
    # the page. Kept only inside this answer's evidence.
    url: str = ""
    site: str = ""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["heading_path"] = list(self.heading_path)
        data["context_chunk_ids"] = list(self.context_chunk_ids)
        data["assets"] = [dict(a) for a in self.assets]
        data["spans"] = [s.as_dict() for s in self.spans]
        return data


# --- confidence ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvidenceConfidence:
    """The evidence's score before anything is written, by answer path."""

    score: float
    reasons: tuple[str, ...]
    signals: Mapping[str, float | int | bool]

    @property
    def level(self) -> ConfidenceLevel:
        return level_of(self.score)


@dataclass(frozen=True)
class GenerationVerification:
    """The written answer checked against its citations and context."""

    score: float
    status: VerificationStatus
    reasons: tuple[str, ...]
    signals: Mapping[str, float | int | bool]

    def as_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "status": str(self.status),
            "reasons": list(self.reasons),
            "signals": dict(self.signals),
        }


@dataclass(frozen=True)
class AnswerFeatures:
    """What is measured of a document answer once it is written, each in [0, 1]: the inputs of
    the calibrated confidence."""

    coverage: float  # question terms in the first line with its source's title
    relevance: float  # lexical relevance of the first line's source to the question
    meaning: float  # calibrated dense relevance of that source (0 when there is none)
    shape: float  # 1 when the first line holds what the question asks for (a quantity …)
    agreement: float  # share of the cited sources that the first line's source is

    NAMES: ClassVar[tuple[str, ...]] = ("coverage", "relevance", "meaning", "shape", "agreement")

    def values(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in self.NAMES)

    def as_dict(self) -> dict[str, float]:
        return {name: round(value, 4) for name, value in asdict(self).items()}


# The fixed levels, for answers without a calibrated model (direct, FAQ, declines).
HIGH = 0.82
MEDIUM = 0.55


def level_of(score: float) -> ConfidenceLevel:
    return ConfidenceLevel.of(score, high=HIGH, medium=MEDIUM)


@dataclass(frozen=True)
class AnswerConfidence:
    """`answer_confidence`: the score and level shown with an answer and what they came from."""

    score: float
    level: ConfidenceLevel
    reasons: tuple[str, ...]
    evidence: EvidenceConfidence
    verification: GenerationVerification
    features: AnswerFeatures | None = None

    @property
    def label(self) -> str:
        return self.level.label

    def as_dict(self) -> dict[str, Any]:
        evidence_level = self.evidence.level
        verification = self.verification
        return {
            "score": self.score,
            "level": str(self.level),
            "label": self.label,
            "reasons": list(self.reasons),
            "evidence_confidence": {
                "score": self.evidence.score,
                "level": str(evidence_level),
                "label": evidence_level.label,
            },
            "generation_verification": verification.as_dict(),
            "signals": {
                **self.evidence.signals,
                "evidence_confidence_score": self.evidence.score,
                "generation_verification_score": verification.score,
                "generation_verification_status": str(verification.status),
                "citation_coverage": verification.signals.get("citation_coverage"),
                "context_overlap": verification.signals.get("context_overlap"),
                **({"features": self.features.as_dict()} if self.features is not None else {}),
            },
        }


@dataclass(frozen=True)
class TurnResult:
    """A finished turn: what the client shows and what was stored."""

    trace_id: uuid.UUID
    conversation_id: uuid.UUID
    user_message_id: int
    assistant_message_id: int
    answer: str
    route: Route
    hit_type: HitType
    intent: IntentResult
    citations: tuple[Citation, ...]
    answer_confidence: AnswerConfidence
    retrieval: dict[str, Any]  # plan, variants, stage timings, first token, cache, …
    kb_version: int | None
    clarify: Clarification | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "trace_id": str(self.trace_id),
            "conversation_id": str(self.conversation_id),
            "user_message_id": self.user_message_id,
            "message_id": self.assistant_message_id,
            "answer": self.answer,
            "route": str(self.route),
            "hit_type": str(self.hit_type),
            "intent": self.intent.as_dict(),
            "citations": [c.as_dict() for c in self.citations],
            "answer_confidence": self.answer_confidence.as_dict(),
            "retrieval": self.retrieval,
            "kb_version": self.kb_version,
            "clarify": self.clarify.as_dict() if self.clarify else None,
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
