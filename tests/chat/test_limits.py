"""Abuse limits of the chat transports: rate limits on SSE and WebSocket, concurrent streams per
caller (against daphne, with real concurrent streams), costly options for signed-in callers
only, and the caps on questions, messages and bodies.

Rates and stream limits are off or high in the test settings; each test sets its own (before
starting daphne: the forked server inherits them).
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.contrib.auth.models import AnonymousUser
from websockets.sync.client import connect

from ragsite.limits import acquire_stream_slot
from ragsite.throttles import SCOPES
from tests.chat.conftest import (
    GREETING,
    RAG_QUESTION,
    csrf_pair,
    live_chat_server,
    of_type,
    post_stream,
    session_cookie_for,
    streamed_chat_requests,
    ws_url,
)
from tests.conftest import redis_cache_for
from tests.fakes.provider_server import Answer
from tests.live import eventually

SLOW_ANSWER = "星河X3 的保修期为 24 个月，保修期内免费更换。" * 20  # ~170 deltas, 0.2 s apart


@pytest.fixture
def throttle_rates(settings):
    def set_rates(**rates: str) -> None:
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {scope: rates.get(scope) for scope in SCOPES}
        }

    return set_rates


def open_socket(base_url: str, cookies: dict[str, str] | None = None):
    headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())} if cookies else None
    return connect(ws_url(base_url), origin=base_url, additional_headers=headers, proxy=None, open_timeout=30)


def ws_turn(socket, body: dict) -> list[dict]:
    socket.send(json.dumps({"type": "question", **body}))
    events = []
    while True:
        events.append(json.loads(socket.recv(timeout=60)))
        if events[-1]["type"] in ("end", "error"):
            return events


def ws_until_token(socket, body: dict) -> list[dict]:
    socket.send(json.dumps({"type": "question", **body}))
    events = []
    while True:
        events.append(json.loads(socket.recv(timeout=60)))
        if events[-1]["type"] in ("token", "end", "error"):
            return events


def first_delta(lines) -> str:
    """Read an SSE body up to its first text delta. The caller keeps `lines`: an httpx line
    iterator that is garbage-collected closes the connection, which hangs up on the stream."""
    return next(line for line in lines if "text-delta" in line)


# --- rate limits on the streaming transports ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_sse_and_websocket_questions_share_the_callers_rate(chat_kb, throttle_rates, member_user):
    # given: anonymous callers may ask 3 questions a minute, signed-in users without limit
    throttle_rates(chat_anon_ip="3/min")
    greeting = {"knowledge_base_id": chat_kb.slug, "question": GREETING}
    cookies, csrf = csrf_pair()
    signed_in = {**session_cookie_for(member_user), **cookies}
    with live_chat_server() as base_url:
        # when
        first, _ = post_stream(base_url, greeting)
        second, _ = post_stream(base_url, greeting)
        with open_socket(base_url) as socket:
            costly = ws_turn(socket, {**greeting, "enable_rerank": True})
            refused_ws = ws_turn(socket, greeting)
        refused_sse, parts = post_stream(base_url, greeting)
        member, member_parts = post_stream(base_url, greeting, cookies=signed_in, headers=csrf)
    # then: streams within the rate are served; past it, SSE answers JSON 429 before any stream
    assert (first.status_code, second.status_code) == (200, 200)
    assert refused_sse.status_code == 429 and parts == []
    assert refused_sse.headers["content-type"].startswith("application/json")
    assert refused_sse.json()["code"] == "throttled"
    assert 1 <= int(refused_sse.headers["retry-after"]) <= 60
    # then: on the socket, each question counts, and a refusal is a coded error event
    assert costly[-1]["type"] == "error" and costly[-1]["code"] == "option_requires_login"
    assert refused_ws == [refused_ws[-1]] and refused_ws[-1]["code"] == "throttled"
    assert refused_ws[-1]["retry_after"] >= 1 and "请求过于频繁" in refused_ws[-1]["error"]
    # then: the signed-in user has a budget of their own
    assert member.status_code == 200 and of_type(member_parts, "finish")


# --- concurrent streams ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_user_streams_at_most_n_answers_at_once_over_sse_and_websocket(
    chat_kb, openai_provider, settings, member_user, engineer_user
):
    # given: two answers at once per user; the model streams slowly
    settings.RAG_MAX_STREAMS_PER_USER = 2
    for _ in range(2):
        openai_provider.enqueue("openai.chat", Answer(text=SLOW_ANSWER, delay=0.2))
    body = {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION, "enable_query_rewrite": False}
    cookies, csrf = csrf_pair()
    member = {**session_cookie_for(member_user), **cookies}
    engineer = {**session_cookie_for(engineer_user), **cookies}
    with live_chat_server() as base_url:
        with httpx.Client(base_url=base_url, cookies=member, timeout=60) as client:
            with client.stream("POST", "/api/chat/stream", json=body, headers=csrf) as streaming:
                lines = streaming.iter_lines()
                first_sse_line = first_delta(lines)
                with open_socket(base_url, member) as socket:
                    ws_started = ws_until_token(socket, body)
                    # when: the same user asks a third time, over either transport
                    third_sse, _ = post_stream(base_url, body, cookies=member, headers=csrf)
                    with open_socket(base_url, member) as other_socket:
                        third_ws = ws_turn(other_socket, body)
                    other_user, other_parts = post_stream(base_url, body, cookies=engineer, headers=csrf)
            # when: the SSE stream is hung up on, its slot is free again
            after_hang_up = eventually(
                lambda: post_stream(base_url, {**body, "question": GREETING}, cookies=member, headers=csrf)[0].status_code == 200
            )
    # then
    assert streaming.status_code == 200 and first_sse_line
    assert ws_started[-1]["type"] == "token"
    assert third_sse.status_code == 429 and third_sse.json()["code"] == "too_many_streams"
    assert third_ws[-1]["type"] == "error" and third_ws[-1]["code"] == "too_many_streams"
    assert other_user.status_code == 200 and of_type(other_parts, "finish")
    assert after_hang_up


@pytest.mark.django_db(transaction=True)
def test_a_json_answer_holds_a_slot_of_the_same_limit_until_its_turn_ends(chat_kb, openai_provider, settings, member_user):
    # given: one answer at a time per user, and a model that is slow to answer
    settings.RAG_MAX_STREAMS_PER_USER = 1
    openai_provider.enqueue("openai.chat", Answer(text="星河X3 的保修期为 24 个月。", first_delay=3.0))
    body = {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION, "enable_query_rewrite": False}
    cookies, csrf = csrf_pair()
    member = {**session_cookie_for(member_user), **cookies}
    with live_chat_server() as base_url, httpx.Client(base_url=base_url, cookies=member, timeout=60) as client:
        with ThreadPoolExecutor(max_workers=1) as pool, httpx.Client(base_url=base_url, cookies=member, timeout=60) as other:
            pending = pool.submit(other.post, "/api/chat", json=body, headers=csrf)
            # when: the same user asks again, over either transport, while the JSON turn waits on the model
            assert eventually(lambda: streamed_chat_requests(openai_provider))
            second_json = client.post("/api/chat", json={**body, "question": GREETING}, headers=csrf)
            stream, parts = post_stream(base_url, {**body, "question": GREETING}, cookies=member, headers=csrf)
            first = pending.result(timeout=60)
        # when: the JSON turn has ended
        after = client.post("/api/chat", json={**body, "question": GREETING}, headers=csrf)
    # then: refused as a stream is refused while it ran, free again once it ended
    assert first.status_code == 200 and "24 个月" in first.json()["answer"]
    assert (second_json.status_code, second_json.json()["code"]) == (429, "too_many_streams")
    assert (stream.status_code, stream.json()["code"], parts) == (429, "too_many_streams", [])
    assert after.status_code == 200

@pytest.mark.django_db(transaction=True)
def test_anonymous_streams_are_capped_per_client_ip(chat_kb, openai_provider, settings):
    # given
    settings.RAG_MAX_STREAMS_PER_ANON_IP = 1
    openai_provider.enqueue("openai.chat", Answer(text=SLOW_ANSWER, delay=0.2))
    body = {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION, "enable_query_rewrite": False}
    with live_chat_server() as base_url:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            with client.stream("POST", "/api/chat/stream", json=body) as streaming:
                lines = streaming.iter_lines()
                first_delta(lines)
                # when: a second anonymous client from the same address (no cookies: a new session)
                second, _ = post_stream(base_url, body)
        # then: once the first ends, the address may stream again
        again = eventually(lambda: post_stream(base_url, {**body, "question": GREETING})[0].status_code == 200)
    assert second.status_code == 429 and second.json()["code"] == "too_many_streams"
    assert again


# --- stream slots are leases -------------------------------------------------------------------------


@pytest.fixture(params=["locmem", "redis"])
def slot_cache(request, settings):
    if request.param == "redis":
        with redis_cache_for(settings):
            yield
    else:
        yield


def _anonymous(address: str):
    from types import SimpleNamespace

    from django.http.request import HttpHeaders

    meta = {"REMOTE_ADDR": address}
    return SimpleNamespace(user=AnonymousUser(), META=meta, headers=HttpHeaders(meta))


def test_a_slot_left_by_a_dead_process_frees_itself_after_the_ttl(slot_cache, settings):
    # given: one stream per address, a 1 s lease, and a stream whose process died (never released)
    settings.RAG_MAX_STREAMS_PER_ANON_IP = 1
    settings.RAG_STREAM_SLOT_TTL_SECONDS = 1
    caller = _anonymous("198.51.100.20")
    assert acquire_stream_slot(caller) is not None
    # when
    while_held = acquire_stream_slot(caller)
    time.sleep(1.3)
    after_ttl = acquire_stream_slot(caller)
    # then
    assert while_held is None
    assert after_ttl is not None


def test_a_live_stream_renews_its_slot_until_its_worker_ends(slot_cache, settings):
    # given
    settings.RAG_MAX_STREAMS_PER_ANON_IP = 1
    settings.RAG_STREAM_SLOT_TTL_SECONDS = 1
    caller = _anonymous("198.51.100.21")

    async def scenario():
        slot = acquire_stream_slot(caller)
        work = asyncio.get_running_loop().create_future()
        slot.hold_while(work)
        # when: the turn runs for over twice the lease
        await asyncio.sleep(2.5)
        during = acquire_stream_slot(caller)
        work.set_result(None)
        await asyncio.sleep(0.05)
        return during, acquire_stream_slot(caller)

    during, after = asyncio.run(scenario())
    # then: held while the worker ran, free as soon as it ended
    assert during is None
    assert after is not None


def test_a_json_answer_renews_its_slot_while_its_turn_runs_in_the_thread(slot_cache, settings):
    # given
    settings.RAG_MAX_STREAMS_PER_ANON_IP = 1
    settings.RAG_STREAM_SLOT_TTL_SECONDS = 1
    caller = _anonymous("198.51.100.22")
    slot = acquire_stream_slot(caller)
    # when: the turn runs for over twice the lease, in the thread holding the slot
    with slot.held():
        time.sleep(2.5)
        during = acquire_stream_slot(caller)
    after = acquire_stream_slot(caller)
    # then: held while the turn ran, free as soon as it ended
    assert during is None
    assert after is not None

def test_slots_are_per_caller(slot_cache, settings):
    # given
    settings.RAG_MAX_STREAMS_PER_ANON_IP = 2
    first, second = _anonymous("198.51.100.30"), _anonymous("198.51.100.31")
    # when
    taken = [acquire_stream_slot(first) for _ in range(3)]
    other = acquire_stream_slot(second)
    taken[0].release()
    reused = acquire_stream_slot(first)
    # then
    assert [slot is not None for slot in taken] == [True, True, False]
    assert other is not None and reused is not None


# --- costly options are for signed-in callers -------------------------------------------------------------

UNKNOWN_KB = {"knowledge_base_id": "no-such-kb", "question": "星河X3 的保修期是多久？"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "options,refused",
    [
        ({"enable_hyde": True}, ["enable_hyde"]),
        ({"enable_query_rewrite": True, "enable_rerank": True}, ["enable_query_rewrite", "enable_rerank"]),
        ({"candidate_k": 31}, ["candidate_k"]),
        ({"top_k": 40, "candidate_k": 200}, ["candidate_k", "top_k"]),
    ],
    ids=["hyde", "rewrite-rerank", "candidate_k", "top_k"],
)
def test_anonymous_retrieval_may_not_ask_for_costly_options(anonymous_api, member_api, options, refused):
    # when
    anonymous = anonymous_api.post("/api/retrieval/search", {**UNKNOWN_KB, **options}, format="json")
    member = member_api.post("/api/retrieval/search", {**UNKNOWN_KB, **options}, format="json")
    # then: refused before anything runs; a signed-in caller gets past the check (to the 404)
    assert anonymous.status_code == 403
    assert anonymous.json()["code"] == "option_requires_login"
    assert anonymous.json()["options"] == refused
    assert "登录后才能使用" in anonymous.json()["detail"]
    assert member.status_code == 404


@pytest.mark.django_db
def test_anonymous_retrieval_may_ask_for_the_defaults_and_less(anonymous_api):
    # when
    response = anonymous_api.post(
        "/api/retrieval/search",
        {**UNKNOWN_KB, "candidate_k": 30, "top_k": 10, "enable_rerank": False, "enable_hyde": False},
        format="json",
    )
    # then
    assert response.status_code == 404


# The stream's admission runs in a worker thread with a connection of its own: it sees only
# committed rows, as a served request does.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/api/chat", "/api/chat/stream"])
def test_anonymous_chat_gets_the_rules_defaults_and_no_more(client, member_user, path):
    # given: with the local provider the rules rewrite follow-ups but do not rerank
    def ask(**options):
        return client.post(path, {**UNKNOWN_KB, **options}, content_type="application/json")

    # when
    rerank = ask(enable_rerank=True)
    many = ask(top_k=31)
    rewrite = ask(enable_query_rewrite=True)
    client.force_login(member_user)
    member = client.post(path, {**UNKNOWN_KB, "enable_rerank": True, "candidate_k": 200},
                         content_type="application/json")
    # then
    assert (rerank.status_code, rerank.json()["code"]) == (403, "option_requires_login")
    assert (many.status_code, many.json()["code"]) == (403, "option_requires_login")
    assert rewrite.status_code == 404  # what the default already does may be asked for
    assert member.status_code == 404


# --- caps ------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_question_length_is_capped_by_settings_on_every_endpoint(client, settings):
    # given
    settings.RAG_MAX_QUESTION_CHARS = 10
    body = {**UNKNOWN_KB, "question": "问" * 11}
    # when
    chat = client.post("/api/chat", body, content_type="application/json")
    stream = client.post("/api/chat/stream", body, content_type="application/json")
    retrieval = client.post("/api/retrieval/search", body, content_type="application/json")
    at_limit = client.post("/api/chat", {**body, "question": "问" * 10}, content_type="application/json")
    # then
    assert (chat.status_code, chat.json()["code"]) == (400, "question_too_long")
    assert (stream.status_code, stream.json()["code"]) == (400, "question_too_long")
    assert retrieval.status_code == 400 and "question" in retrieval.json()["errors"]
    assert at_limit.status_code == 404


# The stream's admission runs in a worker thread with a connection of its own: it sees only
# committed rows, as a served request does.
@pytest.mark.django_db(transaction=True)
def test_chat_messages_are_capped_by_settings(client, settings):
    # given: an AI SDK body resending a long conversation
    settings.RAG_MAX_CHAT_MESSAGES = 3
    message = {"role": "user", "parts": [{"type": "text", "text": "年假有几天？"}]}
    body = {"knowledge_base_id": "no-such-kb", "messages": [message] * 4}
    # when
    too_many = client.post("/api/chat/stream", body, content_type="application/json")
    enough = client.post("/api/chat/stream", {**body, "messages": [message] * 3}, content_type="application/json")
    # then
    assert (too_many.status_code, too_many.json()["code"]) == (400, "too_many_messages")
    assert enough.status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/chat", "/api/chat/stream", "/api/retrieval/search"])
def test_an_oversized_body_is_refused_before_it_is_parsed(client, settings, path):
    # given
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    body = json.dumps({**UNKNOWN_KB, "question": "问" * 4096}, ensure_ascii=False)
    # when
    response = client.post(path, body, content_type="application/json")
    # then
    assert response.status_code == 413
    assert response.json()["code"] == "request_too_large"
