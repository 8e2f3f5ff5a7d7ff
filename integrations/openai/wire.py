"""The chat-completions objects ragsite answers with: `chat.completion`, `chat.completion.chunk`,
`model` and `list`, with ragsite's extension `ragsite` beside OpenAI's fields (the SDKs keep
unknown fields: `completion.ragsite`, or `model_extra["ragsite"]`).

`ragsite` = {message_id, conversation_id, trace_id, hit_type, answer_confidence, citations,
clarify}: `message_id` is the stored answer's (what `POST /api/chat/messages/{id}/feedback`
takes), `citations` are `/api/chat`'s, the ones the stored evidence holds; the text cites them
as `[来源 N]` (the pipeline's `[来源 N](citation://N)` links point at the chat page's sources,
which an OpenAI client does not have; the stored message keeps them).

A streamed answer's chunks: the first has the role, then one per text delta, then the one with
`finish_reason` "stop" and `ragsite` (the last with `choices`), then, with
`stream_options.include_usage`, one with `usage` and no choices, then `data: [DONE]`. The
stored message only exists once the text is complete, so a stream's `id` is
`chatcmpl-<trace id>`; a JSON answer's is `chatcmpl-<message id>`. A failure after the stream
started is `data: {"error": {…}}` (the SDKs raise APIError on it), and nothing after it.
"""

from __future__ import annotations

import json
from typing import Any

from chat.contracts import TurnResult
from chat.pipeline.citations import readable_markers

CONTENT_TYPE = "text/event-stream; charset=utf-8"
HEADERS = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]\n\n"
OWNER = "ragsite"


def completion_id(message_id: int) -> str:
    return f"chatcmpl-{message_id}"


def stream_id(trace_id) -> str:
    return f"chatcmpl-{trace_id}"


def ragsite_extension(result: TurnResult) -> dict[str, Any]:
    return {
        "message_id": result.assistant_message_id,
        "conversation_id": str(result.conversation_id),
        "trace_id": str(result.trace_id),
        "hit_type": str(result.hit_type),
        "answer_confidence": result.answer_confidence.as_dict(),
        "citations": [c.as_dict() for c in result.citations],
        "clarify": result.clarify.as_dict() if result.clarify else None,
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion(result: TurnResult, *, model: str, created: int, tokens: dict[str, int]) -> dict[str, Any]:
    return {
        "id": completion_id(result.assistant_message_id),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": readable_markers(result.answer), "refusal": None},
            "finish_reason": "stop",
            "logprobs": None,
        }],
        "usage": tokens,
        "ragsite": ragsite_extension(result),
    }


class ChunkWriter:
    """The chunks of one streamed answer, framed as server-sent events."""

    def __init__(self, *, id: str, model: str, created: int) -> None:
        self.id = id
        self.model = model
        self.created = created

    def _chunk(self, choices: list, **extra: Any) -> bytes:
        payload = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                   "model": self.model, "choices": choices, **extra}
        return encode(payload)

    def role(self) -> bytes:
        return self._chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None,
                             "logprobs": None}])

    def delta(self, text: str) -> bytes:
        return self._chunk([{"index": 0, "delta": {"content": text}, "finish_reason": None, "logprobs": None}])

    def stop(self, result: TurnResult) -> bytes:
        return self._chunk([{"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None}],
                           ragsite=ragsite_extension(result))

    def usage(self, tokens: dict[str, int]) -> bytes:
        return self._chunk([], usage=tokens)


def encode(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def model_object(*, slug: str, created: int) -> dict[str, Any]:
    return {"id": slug, "object": "model", "created": created, "owned_by": OWNER}
