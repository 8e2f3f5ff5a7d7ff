"""Stage 0: the state of one question while it runs (seed 003 §6.1 `RAGQueryContext`)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from chat.contracts import ChatQuery, Requester, TurnCancelled
from knowledge.models import KnowledgeBase


@dataclass
class QueryContext:
    """Mutable bookkeeping of one turn; the trace and the `end` payload are read from it."""

    query: ChatQuery
    requester: Requester
    kb: KnowledgeBase
    question: str
    cancel: threading.Event
    trace_id: uuid.UUID = field(default_factory=uuid.uuid4)
    kb_version: int | None = None
    conversation_id: uuid.UUID | None = None
    user_message_id: int | None = None
    started: float = field(default_factory=time.perf_counter)
    stage_timings_ms: list[dict[str, Any]] = field(default_factory=list)
    first_token_ms: float | None = None
    degradations: list[str] = field(default_factory=list)
    cache_events: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def data_scope(self) -> dict[str, Any]:
        return {"knowledge_base": self.kb.slug, "visibility": self.kb.visibility}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.stage_timings_ms.append(
                {"stage": name, "elapsed_ms": round((time.perf_counter() - started) * 1000, 2)}
            )

    def mark_first_token(self) -> None:
        if self.first_token_ms is None:
            self.first_token_ms = self.elapsed_ms()

    def elapsed_ms(self) -> float:
        return round((time.perf_counter() - self.started) * 1000, 2)

    def check_cancelled(self) -> None:
        if self.cancel.is_set():
            raise TurnCancelled("the client went away")

    def add_cache(self, summary: dict[str, Any]) -> None:
        self.cache_events.extend(summary.get("events", []))

    def cache_block(self) -> dict[str, Any]:
        hits = sum(1 for e in self.cache_events if e.get("hit"))
        return {
            "enabled": bool(self.cache_events),
            "hit_count": hits,
            "miss_count": len(self.cache_events) - hits,
            "events": list(self.cache_events),
        }

    def timings_block(self) -> dict[str, Any]:
        slowest = max(self.stage_timings_ms, key=lambda t: t["elapsed_ms"], default=None)
        return {
            "stage_timings_ms": list(self.stage_timings_ms),
            "slowest_stage": slowest,
            "first_token_ms": self.first_token_ms,
            "total_elapsed_ms": self.elapsed_ms(),
        }
