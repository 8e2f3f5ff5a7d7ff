"""The model provider misbehaving during a chat answer, through the real SDK adapters (`openai`,
`dashscope`) against the fake server on 127.0.0.1 and a real daphne.

429 and 5xx are retried with backoff (only opening the stream); once the stream
started, a failure is an `error` part with the stable message (no provider text), the trace
carries the provider's error code, and the message is stored as an error with exactly the text
the client received and no evidence: never half an answer marked complete.
"""

from __future__ import annotations

import json

import pytest

from chat.models import ChatEvidence, Message, MessageStatus, QueryTrace, TraceStatus
from tests.chat.conftest import (
    GENERATION_FAILED_TEXT,
    RAG_QUESTION,
    live_chat_server,
    of_type,
    post_stream,
    text_of,
)
from tests.fakes.provider_server import Answer, Fail, Malformed, Reply, Slow

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "星河X3 的保修期为 24 个月[来源 1]，保修期内免费更换。"


def use_provider(name, settings, provider_server):
    """The app's chat model on the fake server through `name`'s SDK; no retries unless a test
    asks for them, a short timeout."""
    settings.RAG_PROVIDER = name
    settings.RAG_CHAT_MODEL = "fake-chat"
    settings.RAG_RERANK_MODEL = "fake-rerank"
    if name == "openai":
        settings.OPENAI_BASE_URL = provider_server.openai_base_url
        settings.OPENAI_API_KEY = "sk-test-secret"
    else:
        settings.DASHSCOPE_BASE_URL = provider_server.dashscope_base_url
        settings.DASHSCOPE_API_KEY = "sk-test-secret"
    settings.RAG_PROVIDER_MAX_RETRIES = 0
    settings.RAG_PROVIDER_RETRY_BASE_DELAY_SECONDS = 0.05
    settings.RAG_PROVIDER_TIMEOUT_SECONDS = 1.5
    provider_server.route = "openai.chat" if name == "openai" else "dashscope.generation"
    return provider_server


@pytest.fixture(params=["openai", "dashscope"])
def provider(request, settings, provider_server):
    return use_provider(request.param, settings, provider_server)


@pytest.fixture
def openai_chat(settings, provider_server):
    # Retries, timeouts and stream parsing are shared code (`_common`), tested once here.
    return use_provider("openai", settings, provider_server)


def ask(base_url, kb):
    # No rewrite, no rerank: the streamed answer is the only model call.
    return post_stream(base_url, {"knowledge_base_id": kb.slug, "question": RAG_QUESTION,
                                  "enable_query_rewrite": False, "enable_rerank": False})


def generation_calls(server):
    return [r for r in server.requests(server.route) if r.route == server.route]


def assert_failed_turn(parts, *, code: str, delivered: str = ""):
    types = [p if isinstance(p, str) else p["type"] for p in parts]
    assert types[-2:] == ["error", "[DONE]"], types
    assert "finish" not in types and "data-answer" not in types
    assert of_type(parts, "error")[0]["errorText"] == GENERATION_FAILED_TEXT
    assert "sk-test-secret" not in json.dumps(parts, ensure_ascii=False)
    assert text_of(parts) == delivered
    trace_id = of_type(parts, "data-retrieval")[0]["data"]["trace_id"]
    trace = QueryTrace.objects.get(trace_id=trace_id)
    assert (trace.status, trace.error_code) == (TraceStatus.FAILED, code)
    message = trace.assistant_message
    assert (message.status, message.content) == (MessageStatus.ERROR, delivered)
    assert not ChatEvidence.objects.filter(message=message).exists()


OPEN_FAULTS = [
    (Fail(429, code="Throttling"), "provider_rate_limited"),
    (Fail(500), "provider_unavailable"),
    (Malformed(), "provider_bad_response"),
]


def test_a_failing_stream_open_is_a_coded_error_part_and_the_next_turn_is_answered(faults_kb, provider):
    with live_chat_server() as base_url:
        for fault, code in OPEN_FAULTS:
            # given
            provider.enqueue(provider.route, fault)
            # when
            response, parts = ask(base_url, faults_kb)
            # then
            assert response.status_code == 200
            assert_failed_turn(parts, code=code)

        # when: the provider is fine again
        provider.enqueue(provider.route, Answer(text=ANSWER))
        again, again_parts = ask(base_url, faults_kb)

    # then
    assert again_parts[-1] == "[DONE]" and of_type(again_parts, "finish")
    assert "24 个月" in text_of(again_parts)
    assert Message.objects.filter(role="assistant", status=MessageStatus.COMPLETE).count() == 1
    assert ChatEvidence.objects.count() == 1


def test_429_and_500_are_retried_with_backoff_and_the_answer_completes(faults_kb, openai_chat, settings):
    provider = openai_chat
    # given: two refusals, then an answer; two retries allowed
    settings.RAG_PROVIDER_MAX_RETRIES = 2
    provider.enqueue(provider.route, Fail(429, code="Throttling"), Fail(503), Answer(text=ANSWER))
    with live_chat_server() as base_url:
        # when
        response, parts = ask(base_url, faults_kb)

    # then
    assert len(generation_calls(provider)) == 3
    assert of_type(parts, "finish") and not of_type(parts, "error")
    assert "24 个月" in text_of(parts)
    trace = QueryTrace.objects.get()
    assert (trace.status, trace.error_code) == (TraceStatus.COMPLETED, "")


def test_a_timeout_is_not_retried_and_ends_in_a_coded_error_part(faults_kb, openai_chat, settings):
    provider = openai_chat
    # given: an answer slower than the provider timeout, retries allowed
    settings.RAG_PROVIDER_MAX_RETRIES = 2
    provider.enqueue(provider.route, Slow(4.0, then=Answer(text=ANSWER)))
    with live_chat_server() as base_url:
        # when
        response, parts = ask(base_url, faults_kb)

    # then
    assert_failed_turn(parts, code="provider_timeout")
    assert len(generation_calls(provider)) == 1


def test_garbage_inside_the_stream_ends_the_answer_with_what_was_delivered(faults_kb, openai_chat):
    provider = openai_chat
    # given: a stream whose second event is not JSON
    first = json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "fake",
                        "choices": [{"index": 0, "delta": {"content": "星河X3"}, "finish_reason": None}]})
    provider.enqueue(provider.route, Reply(raw=f"data: {first}\n\ndata: {{oops\n\n".encode(),
                                           content_type="text/event-stream"))
    with live_chat_server() as base_url:
        # when
        response, parts = ask(base_url, faults_kb)

    # then
    assert_failed_turn(parts, code="provider_bad_response", delivered="星河X3")


def test_a_truncated_stream_is_an_error_not_a_complete_answer(faults_kb, provider):
    deltas = ("星河X3 ", "的保修期", "为 24 ", "个月[来源 1]")
    cuts = [
        # the connection dropped mid-body after three deltas
        ({"cut_after": 3}, "provider_unavailable", "星河X3 的保修期为 24 "),
        # every delta sent, then a clean end without the finish reason: what the filter held
        # back (the marker, until it knew what followed) is delivered before the error
        ({"finish": False}, "provider_bad_response", "星河X3 的保修期为 24 个月[来源 1](citation://1)"),
    ]
    with live_chat_server() as base_url:
        for how, code, delivered in cuts:
            # given
            provider.enqueue(provider.route, Answer(text=ANSWER, deltas=deltas, **how))
            # when
            response, parts = ask(base_url, faults_kb)
            # then: the client saw the text up to the cut, stored as an error, not complete
            assert_failed_turn(parts, code=code, delivered=delivered)
