"""The AI SDK UI message stream protocol v1 (header `x-vercel-ai-ui-message-stream: v1`).

A turn streams as `start`, `start-step`, transient `data-status` parts (stages already done,
with their timings), `data-retrieval` {citations, retrieval_results, retrieval_trace,
conversation_id}, `text-start`, `text-delta`×N, `text-end`, `data-answer` {answer_confidence,
route, hit_type, intent, trace_id, conversation_id, message_id, citations with their supporting
spans, retrieval timings}, `finish-step`, `finish`, `[DONE]`. A clarifying question adds
`data-clarify` {question, mention, choices: [{item_id, name}]} just before `data-answer`. A failure after the stream started
is an `error` part with a stable message. Part shapes follow the `ai` package's chunk schema
exactly (it rejects unknown keys), which the test with the package's own client checks.
"""

from __future__ import annotations

import json
from typing import Any

from .pipeline.events import Evidence, Finished, Started, Status

HEADERS = {
    "x-vercel-ai-ui-message-stream": "v1",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}
CONTENT_TYPE = "text/event-stream; charset=utf-8"
TEXT_ID = "text-1"
DONE = b"data: [DONE]\n\n"


def encode(part: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(part, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def start(started: Started) -> list[bytes]:
    return [
        encode({"type": "start", "messageId": f"msg-{started.trace_id}"}),
        encode({"type": "start-step"}),
    ]


def status(event: Status, *, elapsed_ms: float | None = None) -> bytes:
    data: dict[str, Any] = {"stage": event.stage, "message": event.message}
    if elapsed_ms is not None:
        data["elapsed_ms"] = elapsed_ms
    return encode({"type": "data-status", "data": data, "transient": True})


def retrieval(event: Evidence, started: Started) -> bytes:
    # The conversation id lets a client that stops the first turn of a new conversation (no
    # `data-answer` then) continue and restore that conversation.
    data = {
        **event.as_dict(), "trace_id": str(started.trace_id), "route": str(event.route),
        "conversation_id": str(started.conversation_id),
    }
    return encode({"type": "data-retrieval", "id": "retrieval", "data": data})


def text_start() -> bytes:
    return encode({"type": "text-start", "id": TEXT_ID})


def text_delta(text: str) -> bytes:
    return encode({"type": "text-delta", "id": TEXT_ID, "delta": text})


def finish(event: Finished) -> list[bytes]:
    result = event.result
    data = {
        "answer_confidence": result.answer_confidence.as_dict(),
        "route": str(result.route),
        "hit_type": str(result.hit_type),
        "intent": result.intent.as_dict(),
        "trace_id": str(result.trace_id),
        "conversation_id": str(result.conversation_id),
        "message_id": result.assistant_message_id,
        "citations": [c.as_dict() for c in result.citations],
        "retrieval": result.retrieval,
    }
    # A clarifying question carries its choices as a part of its own, before the answer's.
    clarify = [encode({"type": "data-clarify", "id": "clarify", "data": result.clarify.as_dict()})] if result.clarify else []
    return [
        encode({"type": "text-end", "id": TEXT_ID}),
        *clarify,
        encode({"type": "data-answer", "id": "answer", "data": data}),
        encode({"type": "finish-step"}),
        encode({"type": "finish"}),
        DONE,
    ]


def error(message: str, *, text_open: bool) -> list[bytes]:
    parts = [encode({"type": "text-end", "id": TEXT_ID})] if text_open else []
    return parts + [encode({"type": "error", "errorText": message}), DONE]
