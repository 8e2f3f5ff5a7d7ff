"""`ws/chat/` with a real client (`websockets`) against daphne: the turn's events, many turns
per socket, errors that end a turn and not the socket, HTTP's access rules, cancel, and the
production channel layer on Redis."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from chat.models import ChatEvidence, Conversation, Message, MessageStatus, QueryTrace, TraceStatus
from tests.chat.conftest import (
    FAQ_ANSWER,
    FAQ_QUESTION,
    GREETING,
    RAG_ANSWER_FACT,
    RAG_QUESTION,
    live_chat_server,
    session_cookie_for,
    ws_url,
)
from tests.fakes.provider_server import Answer

pytestmark = pytest.mark.django_db(transaction=True)

from tests.conftest import REDIS_URL, redis_test_prefix
STAGE_MESSAGES = {
    "route": "正在进行查询路由...",
    "prepare": "正在识别问题意图...",
    "faq_search": "正在检索业务 FAQ 知识库...",
    "doc_search": "正在匹配相关业务资料...",
    "generation": "正在生成回答...",
}


def open_socket(base_url: str, *, cookies: dict[str, str] | None = None, origin: str | None = None) -> ClientConnection:
    headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())} if cookies else None
    return connect(ws_url(base_url), origin=origin or base_url, additional_headers=headers, proxy=None, open_timeout=30)


def ask(socket: ClientConnection, knowledge_base_id: str, question: str, **extra) -> list[dict]:
    socket.send(json.dumps({"type": "question", "knowledge_base_id": knowledge_base_id, "question": question, **extra}))
    return turn_events(socket)


def turn_events(socket: ClientConnection, *, until=("end", "error")) -> list[dict]:
    events = []
    while True:
        event = json.loads(socket.recv(timeout=60))
        events.append(event)
        if event["type"] in until:
            return events


def tokens_of(events) -> str:
    return "".join(e["token"] for e in events if e["type"] == "token")


# --- one turn -----------------------------------------------------------------------------------


def test_a_question_streams_start_status_tokens_and_end(chat_kb):
    # given
    with live_chat_server() as base_url, open_socket(base_url) as socket:
        # when
        events = ask(socket, chat_kb.slug, RAG_QUESTION)

    # then: the order of events
    types = [e["type"] for e in events]
    assert types[0] == "start" and types[-1] == "end"
    assert set(types[1:-1]) == {"status", "token"}
    first_token = types.index("token")
    assert all(t == "status" for t in types[1:first_token])
    assert all(t == "token" for t in types[first_token:-1])
    assert types.count("token") >= 1

    start, end = events[0], events[-1]
    conversation = Conversation.objects.get(pk=start["session_id"])
    assert {e["session_id"] for e in events} == {start["session_id"]}
    assert start["knowledge_base_id"] == chat_kb.slug
    assert start["knowledge_base_name"] == chat_kb.name
    assert start["data_scope"]["knowledge_base"] == chat_kb.slug
    assert start["kb_version"] == chat_kb.active_version.number
    assert uuid.UUID(start["trace_id"])

    statuses = [e for e in events if e["type"] == "status"]
    assert [s["stage"] for s in statuses] == ["route", "prepare", "faq_search", "doc_search", "evidence", "generation"]
    for status in statuses:
        expected = STAGE_MESSAGES.get(status["stage"])
        assert status["message"] == expected if expected else re.fullmatch(r"已找到 \d+ 条依据。", status["message"])

    # then: the end event
    assert (end["hit_type"], end["route"]) == ("rag", "retrieval")
    assert end["trace_id"] == start["trace_id"]
    assert end["answer"] == tokens_of(events)
    assert RAG_ANSWER_FACT in end["answer"]
    assert end["sources"] and end["citations"]
    assert end["intent"]["intent"] == "KNOWLEDGE_QUERY"
    assert {"score", "level", "label", "evidence_confidence", "generation_verification"} <= set(end["answer_confidence"])
    retrieval = end["retrieval"]
    stages = [t["stage"] for t in retrieval["stage_timings_ms"]]
    assert {"route", "doc_search", "llm_generation"} <= set(stages)
    assert all(t["elapsed_ms"] >= 0 for t in retrieval["stage_timings_ms"])
    assert retrieval["first_token_ms"] <= retrieval["total_elapsed_ms"]
    assert set(retrieval["cache"]) >= {"enabled", "hit_count", "miss_count", "events"}
    assert retrieval["cache"]["hit_count"] + retrieval["cache"]["miss_count"] == len(retrieval["cache"]["events"])
    assert end["processing_time"] >= 0

    # then: stored as streamed
    message = Message.objects.get(pk=end["message_id"])
    assert message.conversation_id == conversation.pk
    assert (message.status, message.content) == (MessageStatus.COMPLETE, end["answer"])
    assert message.evidence.citations == end["citations"]


# --- many turns, errors ---------------------------------------------------------------------------


def test_one_socket_serves_many_turns_of_one_conversation(chat_kb, member_user):
    # given: a signed-in user's socket
    with live_chat_server() as base_url, open_socket(base_url, cookies=session_cookie_for(member_user)) as socket:
        # when: each question is sent as soon as the previous answer ended
        first = ask(socket, chat_kb.slug, RAG_QUESTION)
        conversation_id = first[0]["session_id"]
        follow_up = ask(socket, chat_kb.slug, "那 X5 呢？", conversation_id=conversation_id)
        faq = ask(socket, chat_kb.slug, FAQ_QUESTION, conversation_id=conversation_id)
        greetings = [ask(socket, chat_kb.slug, GREETING, conversation_id=conversation_id) for _ in range(10)]

    # then
    assert [turn[-1]["type"] for turn in (first, follow_up, faq)] == ["end", "end", "end"]
    assert [turn[-1].get("code", turn[-1]["type"]) for turn in greetings] == ["end"] * 10
    assert {turn[0]["session_id"] for turn in (first, follow_up, faq)} == {conversation_id}
    assert "36 个月" in follow_up[-1]["answer"], "the follow-up was answered with the history"
    assert follow_up[-1]["retrieval"]["rewritten_query"] != "那 X5 呢？"
    assert (faq[-1]["hit_type"], faq[-1]["answer"]) == ("faq_exact", FAQ_ANSWER)
    conversation = Conversation.objects.get(pk=conversation_id)
    assert conversation.user == member_user
    assert conversation.messages.count() == 2 * 13


def test_anonymous_socket_keeps_its_conversation_across_turns(chat_kb):
    # given: an anonymous reader of a public knowledge base, without any cookie yet
    with live_chat_server() as base_url, open_socket(base_url) as socket:
        # when
        first = ask(socket, chat_kb.slug, RAG_QUESTION)
        second = ask(socket, chat_kb.slug, "那 X5 呢？", conversation_id=first[0]["session_id"])

    # then
    assert second[-1]["type"] == "end", second[-1]
    assert second[0]["session_id"] == first[0]["session_id"]
    assert Conversation.objects.get(pk=first[0]["session_id"]).session_key


def test_an_error_ends_the_turn_and_the_socket_serves_the_next_question(chat_kb):
    # given
    with live_chat_server() as base_url, open_socket(base_url) as socket:
        # when: bad requests, then a good question on the same socket
        socket.send("not json at all")
        not_json = turn_events(socket)
        empty = ask(socket, chat_kb.slug, "   ")
        unknown_kb = ask(socket, "no-such-kb", RAG_QUESTION)
        socket.send(json.dumps({"type": "dance"}))
        unknown_type = turn_events(socket)
        good = ask(socket, chat_kb.slug, GREETING)

    # then
    assert [(e[-1]["type"], e[-1]["code"]) for e in (not_json, empty, unknown_kb, unknown_type)] == [
        ("error", "invalid_json"), ("error", "question_empty"), ("error", "knowledge_base_not_found"),
        ("error", "invalid_request"),
    ]
    assert all(len(e) == 1 and e[0]["error"] for e in (not_json, empty, unknown_kb, unknown_type))
    assert [e["type"] for e in good][0] == "start" and good[-1]["type"] == "end"
    assert good[-1]["hit_type"] == "direct_answer"


# --- access -------------------------------------------------------------------------------------


def test_anonymous_socket_cannot_ask_an_internal_kb(internal_chat_kb):
    with live_chat_server() as base_url, open_socket(base_url) as socket:
        events = ask(socket, internal_chat_kb.slug, RAG_QUESTION)
    assert [(e["type"], e["code"]) for e in events] == [("error", "knowledge_base_not_found")]
    assert not QueryTrace.objects.exists()


def test_session_user_can_ask_an_internal_kb(internal_chat_kb, member_user):
    with live_chat_server() as base_url, open_socket(base_url, cookies=session_cookie_for(member_user)) as socket:
        events = ask(socket, internal_chat_kb.slug, RAG_QUESTION)
    assert events[-1]["type"] == "end" and events[-1]["hit_type"] == "rag"
    assert Conversation.objects.get(pk=events[0]["session_id"]).user == member_user


def test_restricted_kb_answers_members_only(restricted_chat_kb, member_user, engineer_user):
    with live_chat_server() as base_url:
        with open_socket(base_url, cookies=session_cookie_for(member_user)) as socket:
            outsider = ask(socket, restricted_chat_kb.slug, RAG_QUESTION)
        with open_socket(base_url, cookies=session_cookie_for(engineer_user)) as socket:
            member = ask(socket, restricted_chat_kb.slug, RAG_QUESTION)
    assert [(e["type"], e["code"]) for e in outsider] == [("error", "knowledge_base_not_found")]
    assert member[-1]["type"] == "end"


def test_another_users_conversation_is_not_found(chat_kb, member_user, staff_user):
    others = Conversation.objects.create(knowledge_base=chat_kb, user=staff_user, title="别人的会话")
    with live_chat_server() as base_url, open_socket(base_url, cookies=session_cookie_for(member_user)) as socket:
        events = ask(socket, chat_kb.slug, RAG_QUESTION, conversation_id=str(others.pk))
    assert [(e["type"], e["code"]) for e in events] == [("error", "conversation_not_found")]
    assert not others.messages.exists()


def test_a_foreign_origin_is_refused(chat_kb):
    with live_chat_server() as base_url:
        with pytest.raises(InvalidStatus) as refused:
            open_socket(base_url, origin="http://evil.example")
    assert refused.value.response.status_code == 403


# --- cancel -------------------------------------------------------------------------------------


def test_cancel_stops_a_slow_turn_and_the_socket_goes_on(chat_kb, openai_provider):
    # given: a model that would stream for a minute
    openai_provider.enqueue("openai.chat", Answer(text="星河X3 的保修期为 24 个月。" * 12, delay=0.3))
    with live_chat_server() as base_url, open_socket(base_url) as socket:
        socket.send(json.dumps({"type": "question", "knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION,
                                "enable_query_rewrite": False}))
        events = []
        while sum(1 for e in events if e["type"] == "token") < 2:
            events.append(json.loads(socket.recv(timeout=60)))
        # when
        socket.send(json.dumps({"type": "cancel"}))
        events += turn_events(socket)
        after = ask(socket, chat_kb.slug, GREETING)

    # then: the turn ended as cancelled, the model stream was abandoned
    assert (events[-1]["type"], events[-1]["code"]) == ("error", "cancelled")
    assert events[-1]["trace_id"] == events[0]["trace_id"]
    log = openai_provider.streams[-1]
    assert log.done.wait(15)
    assert log.aborted and log.sent < log.planned
    trace = QueryTrace.objects.get(trace_id=events[0]["trace_id"])
    assert trace.status == TraceStatus.CANCELLED
    assert trace.assistant_message.status == MessageStatus.CANCELLED
    assert trace.assistant_message.content.startswith(tokens_of(events))
    assert not ChatEvidence.objects.filter(message=trace.assistant_message).exists()
    assert after[-1]["type"] == "end"


# --- the production channel layer ---------------------------------------------------------------


@pytest.fixture
def redis_channel_layer(settings):
    """CHANNEL_LAYERS as production sets them from REDIS_URL, with a prefix of this test's own."""
    import redis

    prefix = redis_test_prefix()
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": prefix},
        }
    }
    yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)


def test_channel_layer_round_trips_a_message_through_redis(redis_channel_layer):
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer
    from channels_redis.core import RedisChannelLayer

    # given
    layer = get_channel_layer()
    assert isinstance(layer, RedisChannelLayer)

    async def round_trip():
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "chat.ping", "text": "你好"})
        received = await layer.receive(channel)
        await layer.group_add("chat-test", channel)
        await layer.group_send("chat-test", {"type": "chat.group", "n": 2})
        grouped = await layer.receive(channel)
        await layer.flush()
        return received, grouped

    # when
    received, grouped = async_to_sync(round_trip)()

    # then
    assert received == {"type": "chat.ping", "text": "你好"}
    assert grouped == {"type": "chat.group", "n": 2}


def _redis_channel_readers(client) -> int:
    return sum(1 for c in client.client_list() if c.get("cmd") == "bzpopmin" and c.get("db") == REDIS_URL.rsplit("/", 1)[-1])


def test_consumer_works_with_the_redis_channel_layer(chat_kb, redis_channel_layer):
    import redis

    # given: daphne configured like production (channels-redis)
    client = redis.Redis.from_url(REDIS_URL)
    readers_before = _redis_channel_readers(client)
    with live_chat_server() as base_url, open_socket(base_url) as socket:
        # when
        first = ask(socket, chat_kb.slug, RAG_QUESTION)
        second = ask(socket, chat_kb.slug, FAQ_QUESTION)
        # the consumer's own channel is read from Redis while the socket is open
        deadline = time.monotonic() + 10
        while _redis_channel_readers(client) <= readers_before and time.monotonic() < deadline:
            time.sleep(0.05)
        reading_from_redis = _redis_channel_readers(client) > readers_before

    # then
    assert first[-1]["type"] == "end" and first[-1]["hit_type"] == "rag"
    assert second[-1]["type"] == "end" and second[-1]["hit_type"] == "faq_exact"
    assert reading_from_redis
