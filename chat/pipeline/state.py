"""The state of one turn while it runs: what it was given, one slot per stage, and the
bookkeeping its trace is written from.

Stages are functions of their inputs that return a typed result (`RouteDecision`,
`Preparation`, `FaqStage`, `RetrievalResponse`, `ContextSelection`, `GenerationReport`); only the
orchestrator (`RAGService`) fills the slots, so a reader finds every write to a turn's state in
one module. Dicts appear only where JSON is written: `trace_payload`, `end_payload` and the
trace record.

Each turn is one OpenTelemetry trace (`ragsite.telemetry`) whose id is the turn's `trace_id`
(the stored `QueryTrace`'s): a root span from receipt to the stored answer or failure, and a child
span per stage, timed where the stage timings are. The spans name the parent explicitly: a turn's
stages run in worker threads and on the event loop, where no context follows them.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from opentelemetry.trace import Span

from knowledge.items.matching import ItemCatalog
from knowledge.models import KnowledgeBase
from ragsite.telemetry import capture_content, mark_failed, start_child_span, start_root_span
from retrieval.contracts import CacheEvent, CacheSummary, RetrievalCancelled, RetrievalResponse, StageTiming

from .. import services
from ..answering.focus import ItemFocus
from ..contracts import (
    AnswerConfidence,
    ChatQuery,
    Citation,
    Clarification,
    HitType,
    IntentResult,
    Requester,
    TurnCancelled,
)
from ..models import Conversation
from .citations import SourceBase
from .context import ContextSelection
from .faq import FaqStage
from .items import ItemConfirmation
from .preparation import HistoryTurn, Preparation
from .routing import RouteDecision
from .rules import Rules


@dataclass(frozen=True)
class GenerationReport:
    """What the answer filter did to the model's text (stage 6)."""

    model: str
    removed_citations: tuple[int, ...]
    blocked_images: int
    links_shown_as_text: int
    declined: bool
    # The sources cited for sentences the answerer left uncited (by their evidence), in order.
    attached_citations: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "removed_citations": list(self.removed_citations),
                "attached_citations": list(self.attached_citations)}


@dataclass
class TurnState:
    query: ChatQuery
    requester: Requester
    kb: KnowledgeBase
    question: str
    conversation: Conversation
    user_message_id: int
    history: tuple[HistoryTurn, ...]
    cancel: threading.Event
    started: float  # perf_counter when the turn was received
    rules: Rules
    trace_id: uuid.UUID = field(default_factory=uuid.uuid4)
    kb_version: int | None = None
    # The other knowledge bases the question reads (access checked), never `kb` itself.
    also_kbs: tuple[KnowledgeBase, ...] = ()

    # One slot per stage, in stage order; None until the stage ran.
    route: RouteDecision | None = None
    preparation: Preparation | None = None
    items: ItemConfirmation | None = None
    faq: FaqStage | None = None
    documents: RetrievalResponse | None = None
    selection: ContextSelection | None = None
    model_name: str = ""
    generation: GenerationReport | None = None
    hit_type: HitType | None = None
    clarification: Clarification | None = None  # a clarifying question instead of an answer

    delivered: list[str] = field(default_factory=list)
    stored: bool = False  # the answer and its evidence are committed: nothing left to fail
    # The item catalog of the bases read (read in preparation), and which items the question is
    # about: the one focus every stage after the confirmation reads.
    catalog: ItemCatalog | None = None
    focus: ItemFocus = field(default_factory=ItemFocus)
    # The numbered citations of the selected evidence (stage 5).
    citations: tuple[Citation, ...] = ()

    timings: list[StageTiming] = field(default_factory=list)
    first_token_ms: float | None = None
    degradations: list[str] = field(default_factory=list)
    cache_events: list[CacheEvent] = field(default_factory=list)

    # The turn's root span: the no-op one unless tracing is configured.
    span: Span = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # From the moment the turn was received (`started`, by the monotonic clock), not from
        # when its question was stored.
        received_ns = time.time_ns() - int((time.perf_counter() - self.started) * 1e9)
        self.span = start_root_span("chat.turn", trace_id=self.trace_id, start_time=received_ns)
        if self.span.is_recording():
            self.span.set_attributes(self._span_attributes())

    # --- bookkeeping ----------------------------------------------------------------------------

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        span = start_child_span(f"chat.{name}", parent=self.span)
        try:
            yield
        except (TurnCancelled, RetrievalCancelled, GeneratorExit, asyncio.CancelledError):
            if span.is_recording():
                span.set_attribute("rag.cancelled", True)
            raise
        except BaseException as exc:
            mark_failed(span, exc)
            raise
        finally:
            elapsed_ms = round((time.perf_counter() - started) * 1000, 2)
            self.timings.append(StageTiming(name, elapsed_ms))
            if span.is_recording():
                span.set_attributes({"rag.stage": name, "rag.elapsed_ms": elapsed_ms})
                span.end()

    def end_span(self, record: services.TraceRecord | None, *, answer: str = "",
                 error: BaseException | None = None) -> None:
        """End the turn's span with what its `QueryTrace` stores (`record`; None when even that
        could not be built). Once: a span already ended, or a no-op one, is left alone."""
        span = self.span
        if not span.is_recording():
            return
        if record is not None:
            span.set_attributes(_record_attributes(record))
        hits = sum(1 for event in self.cache_events if event.hit)
        span.set_attributes({
            **{f"rag.stage_ms.{timing.stage}": timing.elapsed_ms for timing in self.timings},
            "rag.cache.hits": hits,
            "rag.cache.misses": len(self.cache_events) - hits,
        })
        if answer and capture_content():
            span.set_attribute("output.value", answer)
        if error is not None or (record is not None and record.error_class):
            mark_failed(span, error, code=record.error_code if record is not None else "")
        elif record is not None and record.error_code:
            # Cancelled (the client went away): not a failure of the service.
            span.set_attributes({"rag.error_code": record.error_code, "rag.cancelled": True})
        span.end()

    def _span_attributes(self) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "rag.trace_id": str(self.trace_id),
            "rag.kb.id": self.kb.pk,
            "rag.kb.slug": self.kb.slug,
            # Langfuse groups a conversation's turns by it.
            "session.id": str(self.conversation.pk),
            "rag.history_turns": len(self.history),
        }
        if self.kb_version is not None:
            attributes["rag.kb.version"] = self.kb_version
        if self.also_kbs:
            attributes["rag.also_kb.slugs"] = [kb.slug for kb in self.also_kbs]
        if capture_content():
            attributes["input.value"] = self.question
        return attributes

    def mark_first_token(self) -> None:
        if self.first_token_ms is None:
            self.first_token_ms = self.elapsed_ms()

    def elapsed_ms(self) -> float:
        return round((time.perf_counter() - self.started) * 1000, 2)

    def check_cancelled(self) -> None:
        if self.cancel.is_set():
            raise TurnCancelled("the client went away")

    def record_search(self, *, cache: CacheSummary, degradations: Iterable[str]) -> None:
        """A search the turn ran: its cache lookups and what it had to do without."""
        self.cache_events.extend(cache.events)
        self.degradations.extend(degradations)

    @property
    def scope(self) -> tuple[KnowledgeBase, ...]:
        return (self.kb, *self.also_kbs)

    @property
    def also_kb_ids(self) -> tuple[int, ...]:
        return tuple(kb.pk for kb in self.also_kbs)

    @property
    def bases(self) -> dict[int, SourceBase]:
        return {kb.pk: SourceBase(slug=kb.slug, name=kb.name) for kb in self.scope}

    @property
    def link_hosts(self) -> tuple[str, ...]:
        """Hosts an answer may link to: any knowledge base's it read from."""
        return tuple(dict.fromkeys(host for kb in self.scope for host in kb.link_hosts))

    @property
    def data_scope(self) -> dict[str, Any]:
        scope: dict[str, Any] = {"knowledge_base": self.kb.slug, "visibility": self.kb.visibility}
        if self.also_kbs:
            scope["knowledge_bases"] = [
                {"slug": kb.slug, "name": kb.name, "visibility": kb.visibility,
                 "version": kb.active_version.number if kb.active_version_id else None}
                for kb in self.scope
            ]
        return scope

    @property
    def retrieval_question(self) -> str:
        return self.preparation.rewritten_query if self.preparation else self.question

    @property
    def insufficient_reason(self) -> str:
        return self.selection.insufficient_reason if self.selection else ""

    def query_variants(self) -> list[str]:
        if self.documents:
            return list(self.documents.trace.query_variants)
        return list(self.preparation.variants) if self.preparation else [self.question]

    # --- JSON edge ------------------------------------------------------------------------------

    def cache_block(self) -> dict[str, Any]:
        hits = sum(1 for event in self.cache_events if event.hit)
        return {
            "enabled": bool(self.cache_events),
            "hit_count": hits,
            "miss_count": len(self.cache_events) - hits,
            "events": [asdict(event) for event in self.cache_events],
        }

    def stage_timings(self) -> list[dict[str, Any]]:
        return [asdict(timing) for timing in self.timings]

    def timings_block(self) -> dict[str, Any]:
        slowest = max(self.timings, key=lambda t: t.elapsed_ms, default=None)
        return {
            "stage_timings_ms": self.stage_timings(),
            "slowest_stage": asdict(slowest) if slowest else None,
            "first_token_ms": self.first_token_ms,
            "total_elapsed_ms": self.elapsed_ms(),
        }

    def _stages_block(self) -> dict[str, Any]:
        blocks = {
            "route": self.route,
            "preparation": self.preparation,
            "items": self.items,
            "faq": self.faq,
            "documents": self.documents.trace if self.documents else None,
            "context": self.selection,
            "generation": self.generation,
        }
        return {name: block.as_dict() for name, block in blocks.items() if block is not None}

    def trace_payload(self) -> dict[str, Any]:
        return {
            "trace_id": str(self.trace_id),
            **self._stages_block(),
            "query_variants": self.query_variants(),
            "plan": self.preparation.plan.as_dict() if self.preparation else None,
            "insufficient_context_reason": self.insufficient_reason,
            "cache": self.cache_block(),
            "degradations": list(dict.fromkeys(self.degradations)),
            **({"clarify": self.clarification.as_dict()} if self.clarification else {}),
            **self.timings_block(),
        }

    def end_payload(self) -> dict[str, Any]:
        timings = {t.stage: t.elapsed_ms for t in self.timings}
        prepared = self.preparation
        return {
            "plan": prepared.plan.as_dict() if prepared else None,
            "query_variants": self.query_variants(),
            "rewritten_query": self.retrieval_question,
            "history_rewrite_used": prepared.history_rewrite_used if prepared else False,
            "faq_elapsed_ms": timings.get("faq_search"),
            "doc_elapsed_ms": timings.get("doc_search"),
            "sources": list(self.selection.sources) if self.selection else [],
            "insufficient_context_reason": self.insufficient_reason,
            "cache": self.cache_block(),
            "degradations": list(dict.fromkeys(self.degradations)),
            **self.timings_block(),
        }

    def trace_record(self, *, intent: IntentResult | None, confidence: AnswerConfidence | None,
                     error: BaseException | None = None, error_code: str = "") -> services.TraceRecord:
        return services.TraceRecord(
            trace_id=self.trace_id,
            kb_version=self.kb_version,
            question=self.question,
            rewritten_query=self.preparation.rewritten_query if self.preparation else "",
            route=str(self.route.route) if self.route else "",
            intent=intent.intent if intent else "",
            hit_type=str(self.hit_type) if self.hit_type else "",
            confidence_score=confidence.score if confidence else None,
            confidence_level=str(confidence.level) if confidence else "",
            stage_timings=self.stage_timings(),
            first_token_ms=self.first_token_ms,
            total_ms=self.elapsed_ms(),
            cache=self.cache_block(),
            degradations=list(dict.fromkeys(self.degradations)),
            insufficient_reason=self.insufficient_reason,
            model_name=self.model_name,
            error_class=type(error).__name__ if error is not None else "",
            error_code=error_code,
            details=self.trace_payload(),
        )


def _record_attributes(record: services.TraceRecord) -> dict[str, Any]:
    """The span's share of a `QueryTrace`: outcomes, timings and degradations, never text
    (the rewritten question only when content may be captured)."""
    attributes: dict[str, Any] = {
        "rag.route": record.route,
        "rag.intent": record.intent,
        "rag.hit_type": record.hit_type,
        "rag.confidence.level": record.confidence_level,
        "rag.model": record.model_name,
        "rag.total_ms": record.total_ms,
        "rag.degradations": list(record.degradations),
        "rag.insufficient_reason": record.insufficient_reason,
        "rag.error_class": record.error_class,
        "rag.error_code": record.error_code,
    }
    if record.kb_version is not None:
        attributes["rag.kb.version"] = record.kb_version
    if record.confidence_score is not None:
        attributes["rag.confidence.score"] = record.confidence_score
    if record.first_token_ms is not None:
        attributes["rag.first_token_ms"] = record.first_token_ms
    if record.model_name:
        attributes["gen_ai.request.model"] = record.model_name
    if capture_content() and record.rewritten_query:
        attributes["rag.rewritten_query"] = record.rewritten_query
    # Empty strings say nothing: a span shows only what the turn had.
    return {key: value for key, value in attributes.items() if value != ""}
