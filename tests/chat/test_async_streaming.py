"""A remote model's answers stream on daphne's event loop, not in the turn threads, and a turn
that finds every turn thread busy waits a bounded time, then gets 503 `server_busy`.

daphne in a child process on the test database (PostgreSQL in CI), the fake OpenAI-compatible
model on 127.0.0.1 streaming through the stock `openai` SDK's async client, httpx as the client.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import httpx
import pytest
from django.db import connections

from chat.models import Message, MessageStatus, QueryTrace, TraceStatus
from tests.chat.conftest import RAG_QUESTION, live_chat_server, of_type, post_stream, text_of
from tests.fakes.provider_server import Answer, Slow
from tests.live import eventually

pytestmark = pytest.mark.django_db(transaction=True)

STREAMS = 6
ANSWER = ("星河X3 的保修期", "为 24 个月", "[来源 1]", "。")


def _ask(base_url: str, kb_slug: str, results: list, index: int, question: str = RAG_QUESTION) -> None:
    results[index] = post_stream(
        base_url, {"knowledge_base_id": kb_slug, "question": question, "enable_query_rewrite": False}
    )


def _in_parallel(count: int, target) -> list:
    results: list = [None] * count
    threads = [threading.Thread(target=target, args=(results, i)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def test_more_answers_stream_at_once_than_there_are_turn_threads(chat_kb, openai_provider, settings):
    # given: two turn threads, and a model that takes 3 s to its first token for each of 6 turns
    settings.RAG_CHAT_THREADS = 2
    openai_provider.enqueue("openai.chat", *[Answer(deltas=ANSWER, first_delay=3.0)] * STREAMS)
    with live_chat_server() as base_url:
        # when: six readers ask at once
        results = _in_parallel(STREAMS, lambda out, i: _ask(base_url, chat_kb.slug, out, i))

    # then: all six model streams were open together (a thread per waiting answer would have
    # allowed two), and every reader got the whole answer, stored as streamed
    assert openai_provider.max_open_streams == STREAMS
    for response, parts in results:
        assert response.status_code == 200
        assert text_of(parts) == "星河X3 的保修期为 24 个月[来源 1](citation://1)。"
        data = of_type(parts, "data-answer")[0]["data"]
        stored = Message.objects.get(pk=data["message_id"])
        assert stored.status == MessageStatus.COMPLETE
        assert stored.content == text_of(parts)
        assert QueryTrace.objects.get(trace_id=data["trace_id"]).status == TraceStatus.COMPLETED


@contextmanager
def server_pool_of(size: int):
    """A daphne started inside the block opens a connection pool of at most `size`."""
    options = connections["default"].settings_dict.get("OPTIONS", {})
    if "pool" not in options:
        pytest.skip("the connection pool is PostgreSQL's (set DATABASE_URL)")
    saved = dict(options["pool"])
    options["pool"].update(min_size=1, max_size=size, timeout=5)
    try:
        yield
    finally:
        options["pool"].clear()
        options["pool"].update(saved)


def test_streaming_answers_hold_no_connection_while_the_model_writes(chat_kb, openai_provider):
    # given: a server whose pool has 3 connections, a model taking 3 s to its first token
    openai_provider.enqueue("openai.chat", *[Answer(deltas=ANSWER, first_delay=3.0)] * STREAMS)
    with server_pool_of(3), live_chat_server() as base_url:
        # when: six readers ask at once
        results = _in_parallel(STREAMS, lambda out, i: _ask(base_url, chat_kb.slug, out, i))

    # then: all six answered (a request that kept the connection its admission took, or a turn
    # that kept one while it streamed, would leave the others waiting for the pool, then 503)
    assert openai_provider.max_open_streams == STREAMS
    assert [response.status_code for response, _parts in results] == [200] * STREAMS
    assert all(text_of(parts) == "星河X3 的保修期为 24 个月[来源 1](citation://1)。" for _r, parts in results)


def test_a_turn_finding_every_turn_thread_busy_is_refused_after_its_wait(chat_kb, openai_provider, settings):
    # given: one turn thread, waits of 0.5 s for it, and a first turn whose reranking takes 4 s
    settings.RAG_CHAT_THREADS = 1
    settings.RAG_CHAT_QUEUE_TIMEOUT_SECONDS = 0.5
    openai_provider.enqueue("openai.rerank", Slow(4.0))
    openai_provider.enqueue("openai.chat", Answer(deltas=ANSWER))
    second_question = "星河X3 的保修期是几年？"
    with live_chat_server() as base_url:
        first: list = [None]
        asking = threading.Thread(target=_ask, args=(base_url, chat_kb.slug, first, 0))
        asking.start()
        assert eventually(lambda: openai_provider.requests("openai.rerank"), within=30)

        # when: a second reader asks while the first turn holds the only thread
        response, parts = post_stream(
            base_url, {"knowledge_base_id": chat_kb.slug, "question": second_question,
                       "enable_query_rewrite": False}
        )
        asking.join(timeout=60)

    # then: 503 server_busy with Retry-After, before any stream started, nothing of it stored;
    # the first reader's answer was not disturbed
    assert response.status_code == 503
    assert response.json()["code"] == "server_busy"
    assert int(response.headers["Retry-After"]) == settings.RAG_BUSY_RETRY_AFTER_SECONDS
    assert parts == []
    assert not Message.objects.filter(content=second_question).exists()
    first_response, first_parts = first[0]
    assert first_response.status_code == 200
    assert text_of(first_parts) == "星河X3 的保修期为 24 个月[来源 1](citation://1)。"


def test_a_turn_beyond_the_answers_a_process_runs_at_once_is_refused_after_its_wait(
        chat_kb, openai_provider, settings):
    # given: one answer at a time, waits of 0.5 s, a first answer whose model is silent for 4 s
    # (it streams on the event loop: no worker thread is busy meanwhile)
    settings.RAG_CHAT_MAX_ACTIVE_TURNS = 1
    settings.RAG_CHAT_QUEUE_TIMEOUT_SECONDS = 0.5
    openai_provider.enqueue("openai.chat", Answer(deltas=ANSWER, first_delay=4.0))
    with live_chat_server() as base_url:
        first: list = [None]
        asking = threading.Thread(target=_ask, args=(base_url, chat_kb.slug, first, 0))
        asking.start()
        assert eventually(lambda: openai_provider.open_streams == 1, within=30)

        # when
        response, parts = post_stream(
            base_url, {"knowledge_base_id": chat_kb.slug, "question": "星河X3 保修多久？", "enable_query_rewrite": False}
        )
        asking.join(timeout=60)

    # then
    assert (response.status_code, response.json()["code"]) == (503, "server_busy")
    assert "Retry-After" in response.headers
    assert first[0][0].status_code == 200
    assert text_of(first[0][1]) == "星河X3 的保修期为 24 个月[来源 1](citation://1)。"


def test_a_reader_leaving_while_the_model_is_silent_cancels_the_turn(chat_kb, openai_provider):
    # given: a model that would take 30 s to its first token
    openai_provider.enqueue("openai.chat", Answer(deltas=ANSWER, first_delay=30.0))
    with live_chat_server() as base_url:
        # when: the reader reads up to the evidence, then hangs up
        with httpx.Client(base_url=base_url, timeout=httpx.Timeout(60)) as client:
            body = {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION, "enable_query_rewrite": False}
            with client.stream("POST", "/api/chat/stream", json=body) as response:
                for line in response.iter_lines():
                    if '"data-retrieval"' in line:
                        break

        # then: the turn is stored as cancelled long before the model would have spoken
        def cancelled_trace():
            return QueryTrace.objects.filter(status=TraceStatus.CANCELLED).first()

        trace = eventually(cancelled_trace, within=15)
    assert trace is not None
    assert Message.objects.get(trace_id=trace.trace_id, role="assistant").status == MessageStatus.CANCELLED
