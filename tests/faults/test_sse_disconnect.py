"""The client of POST /api/chat/stream hanging up at each stage, against a real daphne.

A client disconnect cancels the pipeline and any model call. Whatever the stage, the
turn ends stored as cancelled (`client_disconnected`) with the text the client was sent and no
evidence, the model stream is closed, and the server answers the next question. Hanging up
mid-text is tests/chat/test_cancellation.py; the stages around it are here.
"""

from __future__ import annotations

import json
import socket
import threading
from urllib.parse import urlsplit

import httpx
import pytest

from chat.models import ChatEvidence, Message, MessageStatus, QueryTrace, TraceStatus
from tests.chat.conftest import (
    GREETING,
    RAG_QUESTION,
    csrf_pair,
    live_chat_server,
    of_type,
    post_stream,
    session_cookie_for,
    text_of,
)
from tests.fakes.provider_server import Answer, Held, Reply
from tests.live import eventually

pytestmark = pytest.mark.django_db(transaction=True)

REWRITE = {"choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": '{"rewrite": "星河X3 路由器的保修期有多长？"}'}}]}


def body(kb, **options):
    return {"knowledge_base_id": kb.slug, "question": RAG_QUESTION, "enable_rerank": False, **options}


def read_parts_until(response: httpx.Response, done) -> list[dict]:
    parts: list[dict] = []
    for line in response.iter_lines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            parts.append(json.loads(line[5:]))
            if done(parts):
                return parts
    raise AssertionError(f"the stream ended first: {parts}")


def cancelled_trace():
    trace = eventually(lambda: QueryTrace.objects.filter(status=TraceStatus.CANCELLED).first())
    assert trace is not None, list(QueryTrace.objects.values("status", "error_code"))
    assert trace.error_code == "client_disconnected"
    assert trace.assistant_message.status == MessageStatus.CANCELLED
    assert not ChatEvidence.objects.exists()
    assert not Message.objects.filter(role="assistant", status=MessageStatus.COMPLETE).exists()
    return trace


def assert_next_question_is_answered(base_url, kb):
    response, parts = post_stream(base_url, {"knowledge_base_id": kb.slug, "question": GREETING})
    assert response.status_code == 200 and parts[-1] == "[DONE]"
    assert of_type(parts, "data-answer")[0]["data"]["hit_type"] == "direct_answer"


def test_hanging_up_before_data_retrieval_cancels_the_turn(faults_kb, openai_provider, member_user):
    # given: a signed-in client (rewrite is theirs to ask for) and a slow rewrite during retrieval
    released = threading.Event()  # the rewrite is answered only after the client has hung up
    openai_provider.enqueue("openai.chat", Held(released, then=Reply(json_body=REWRITE)))
    csrf_cookie, csrf_header = csrf_pair()
    cookies = {**session_cookie_for(member_user), **csrf_cookie}
    payload = json.dumps(body(faults_kb, enable_query_rewrite=True)).encode()
    with live_chat_server() as base_url:
        host, port = urlsplit(base_url).hostname, urlsplit(base_url).port
        request = (
            f"POST /api/chat/stream HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nX-CSRFToken: {csrf_header['X-CSRFToken']}\r\n"
            f"Cookie: {'; '.join(f'{k}={v}' for k, v in cookies.items())}\r\n\r\n"
        ).encode() + payload
        with socket.create_connection((host, port)) as client:
            client.sendall(request)
            # when: the client hangs up while retrieval waits for the rewrite (no byte answered yet)
            assert eventually(lambda: openai_provider.requests("openai.chat")), "retrieval never started"
            client.settimeout(0.2)
            with pytest.raises(TimeoutError):
                client.recv(1)
        released.set()

        # then
        trace = cancelled_trace()
        assert trace.assistant_message.content == ""
        assert_next_question_is_answered(base_url, faults_kb)
    # the rewrite answered, but nothing was generated for a client who was gone
    assert not [r for r in openai_provider.requests("openai.chat") if r.body.get("stream")]


@pytest.mark.parametrize("stage", ["before_first_delta", "before_finish"])
def test_hanging_up_after_data_retrieval_cancels_the_turn_and_closes_the_model_stream(
    faults_kb, openai_provider, stage
):
    # given: the model is slow to start, or slow to finish after its last words
    if stage == "before_first_delta":
        answer = Answer(deltas=("星河X3 ", "的保修期", "为 24 ", "个月", "[来源 1]。"), first_delay=2.0, delay=0.5)
        hang_up_after = lambda parts: of_type(parts, "data-retrieval")  # noqa: E731
    else:
        answer = Answer(deltas=("星河X3 的保修期为 24 个月[来源 1]。", "保修期内免费更换。", ""), delay=1.5)
        hang_up_after = lambda parts: "保修期内免费更换" in text_of(parts)  # noqa: E731
    openai_provider.enqueue("openai.chat", answer)
    with live_chat_server() as base_url:
        with httpx.Client(base_url=base_url, timeout=30) as client:
            with client.stream("POST", "/api/chat/stream", json=body(faults_kb, enable_query_rewrite=False)) as response:
                # when
                parts = read_parts_until(response, hang_up_after)

        # then: the turn is stored as cancelled with what was sent, and no model stream is
        # left open (before the first delta the model may not even have been called)
        trace = cancelled_trace()
        for log in openai_provider.streams:
            assert log.done.wait(15), "a model stream is still being read"
            assert log.sent < log.planned or stage == "before_finish"  # its last chunk was in flight
        if stage == "before_first_delta":
            assert trace.assistant_message.content == ""
        assert trace.assistant_message.content.startswith(text_of(parts))
        assert not of_type(parts, "finish")
        assert_next_question_is_answered(base_url, faults_kb)
