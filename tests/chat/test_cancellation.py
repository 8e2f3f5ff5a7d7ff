"""A client that goes away cancels its turn, all the way to the model stream; a slow model
delays only its own stream, never the server.

The model is the fake OpenAI-compatible provider with slow streams; the client is httpx over a
real socket to daphne.
"""

from __future__ import annotations

import json

import httpx
import pytest

from chat.models import ChatEvidence, MessageStatus, QueryTrace, TraceStatus
from tests.chat.conftest import (
    GREETING,
    RAG_QUESTION,
    live_chat_server,
    of_type,
    post_stream,
    text_of,
)
from tests.fakes.provider_server import Answer, Slow
from tests.live import eventually

pytestmark = pytest.mark.django_db(transaction=True)

LONG_ANSWER = "星河X3 的保修期为 24 个月，保修期内免费更换。" * 20  # 3-char deltas: ~170 of them


def rag_body(kb) -> dict:
    # No model rewrite of the question: the only chat call is the streamed answer.
    return {"knowledge_base_id": kb.slug, "question": RAG_QUESTION, "enable_query_rewrite": False}


def read_until_deltas(response: httpx.Response, count: int) -> list[dict]:
    parts = []
    for line in response.iter_lines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            parts.append(json.loads(line[5:]))
            if len(of_type(parts, "text-delta")) >= count:
                return parts
    raise AssertionError(f"the stream ended before {count} deltas: {parts}")


def test_client_disconnect_cancels_the_turn_and_closes_the_model_stream(chat_kb, openai_provider):
    # given: a model that streams slowly, for about a minute
    openai_provider.enqueue("openai.chat", Answer(text=LONG_ANSWER, delay=0.3))
    with live_chat_server() as base_url:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            with client.stream("POST", "/api/chat/stream", json=rag_body(chat_kb)) as response:
                parts = read_until_deltas(response, 2)
            # when: the client hangs up mid-answer (leaving the block closes the connection)

        # then: the server stopped reading the model, long before its end
        log = openai_provider.streams[-1]
        assert log.done.wait(15), "the model stream is still being read"
        assert log.aborted
        assert log.sent < log.planned
        # then: the turn is stored as cancelled, with what was produced and no evidence
        trace_id = of_type(parts, "data-retrieval")[0]["data"]["trace_id"]
        trace = eventually(lambda: QueryTrace.objects.filter(trace_id=trace_id).first())
    assert trace is not None
    assert (trace.status, trace.error_code) == (TraceStatus.CANCELLED, "client_disconnected")
    message = trace.assistant_message
    assert message.status == MessageStatus.CANCELLED
    assert message.content.startswith(text_of(parts))
    assert len(message.content) < len(LONG_ANSWER)
    assert not ChatEvidence.objects.filter(message=message).exists()


def test_slow_first_token_still_streams_and_is_traced(chat_kb, openai_provider):
    # given: the model answers only after a pause
    pause = 1.0
    openai_provider.enqueue(
        "openai.chat", Slow(pause, then=Answer(deltas=("星河X3 的保修期", "为 24 个月", "[来源 1]。")))
    )
    with live_chat_server() as base_url:
        # when
        response, parts = post_stream(base_url, rag_body(chat_kb))

    # then: the stream is complete and in order
    assert response.status_code == 200
    assert parts[-1] == "[DONE]"
    types = [p["type"] for p in parts[:-1]]
    assert types.index("data-retrieval") < types.index("text-start") < types.index("text-delta")
    assert types[-4:] == ["text-end", "data-answer", "finish-step", "finish"]
    assert text_of(parts) == "星河X3 的保修期为 24 个月[来源 1](citation://1)。"
    # then: the first token came after the pause and after everything before generation
    answer = of_type(parts, "data-answer")[0]["data"]
    trace = QueryTrace.objects.get(trace_id=answer["trace_id"])
    timings = {t["stage"]: t["elapsed_ms"] for t in trace.stage_timings}
    before_generation = sum(ms for stage, ms in timings.items() if stage in ("route", "prepare", "faq_search", "doc_search"))
    assert trace.first_token_ms >= pause * 1000
    assert trace.first_token_ms >= before_generation
    assert timings["llm_generation"] >= pause * 1000
    assert trace.first_token_ms <= trace.total_ms
    assert answer["retrieval"]["first_token_ms"] == trace.first_token_ms


def test_a_held_open_stream_does_not_block_other_requests(chat_kb, openai_provider):
    # given: one answer streaming slowly (about a minute in all)
    openai_provider.enqueue("openai.chat", Answer(text=LONG_ANSWER, delay=0.3))
    with live_chat_server() as base_url:
        with httpx.Client(base_url=base_url, timeout=60) as slow_client:
            with slow_client.stream("POST", "/api/chat/stream", json=rag_body(chat_kb)) as slow:
                read_until_deltas(slow, 1)
                log = openai_provider.streams[-1]

                # when: other requests arrive while it streams
                with httpx.Client(base_url=base_url, timeout=60) as other:
                    listing = other.get("/api/chat/conversations")
                short, short_parts = post_stream(base_url, {"knowledge_base_id": chat_kb.slug, "question": GREETING})

                # then: they were answered while the slow stream was still mid-way
                still_streaming = not log.done.is_set() and log.sent < log.planned
    assert listing.status_code == 200 and "results" in listing.json()
    assert short.status_code == 200 and short_parts[-1] == "[DONE]"
    assert of_type(short_parts, "data-answer")[0]["data"]["hit_type"] == "direct_answer"
    assert still_streaming
