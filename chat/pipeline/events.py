"""What `RAGService.run` yields, in this order: `Started`, `Status`…, `Evidence`, `Delta`…,
`Finished`. Transports translate them: the SSE view into AI SDK UI message parts, the WebSocket
consumer into the WebSocket's events (`start` / `status` / `token` / `end` / `error`).

Everything up to and including `Evidence` is preparation (validation, access, routing, retrieval,
citations): a failure there is an ordinary error response. After `Evidence` the answer streams.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from chat.contracts import Citation, Route, TurnResult
from retrieval.contracts import RetrievalResult


@dataclass(frozen=True)
class Started:
    trace_id: uuid.UUID
    conversation_id: uuid.UUID
    user_message_id: int
    kb_id: str  # slug
    kb_name: str
    kb_version: int | None
    data_scope: dict[str, Any]


@dataclass(frozen=True)
class Status:
    stage: str
    message: str


@dataclass(frozen=True)
class Evidence:
    """The evidence the answer will be built from, sent before any text (`data-retrieval`)."""

    citations: tuple[Citation, ...]
    retrieval_results: tuple[RetrievalResult, ...]
    retrieval_trace: dict[str, Any]  # the trace as stored: a JSON document already
    route: Route

    def as_dict(self) -> dict[str, Any]:
        return {
            "citations": [c.as_dict() for c in self.citations],
            "retrieval_results": [r.as_dict() for r in self.retrieval_results],
            "retrieval_trace": self.retrieval_trace,
        }


@dataclass(frozen=True)
class Delta:
    text: str


@dataclass(frozen=True)
class Finished:
    result: TurnResult


Event = Started | Status | Evidence | Delta | Finished
