"""`POST /api/chat/stream` over a real socket: daphne in a child process, httpx as the client.

The stream is the AI SDK UI message stream protocol v1; these tests pin its part order and
contents, what is stored for each turn, the JSON errors before the stream starts, and the
`error` part after it started.
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager

import httpx
import pytest
from django.db import connection

from chat.models import ChatEvidence, Conversation, Message, MessageStatus, QueryTrace, TraceStatus
from knowledge.models import Chunk, KnowledgeBaseVersion, Visibility
from tests.chat.conftest import (
    FAQ_ANSWER,
    FAQ_NEAR_QUESTION,
    FAQ_QUESTION,
    GENERATION_FAILED_TEXT,
    GREETING,
    OFF_TOPIC_QUESTION,
    RAG_ANSWER_FACT,
    RAG_QUESTION,
    csrf_pair,
    live_chat_server,
    of_type,
    post_stream,
    session_cookie_for,
    streamed_chat_requests,
    text_of,
)
from tests.conftest import make_kb
from tests.fakes.provider_server import Answer

pytestmark = pytest.mark.django_db(transaction=True)

CITATION_MARKER = re.compile(r"\[来源 (\d+)\]\(citation://(\d+)\)")
LABELS = {"high": "高", "medium": "中", "low": "低"}


# The keys each chunk type of the `ai` package's UI message chunk schema knows. ai 5 checks them
# strictly (an unknown key fails the stream), ai 6 tolerates extras: no part may carry others.
CHUNK_KEYS = {
    "start": {"type", "messageId", "messageMetadata"},
    "start-step": {"type"},
    "text-start": {"type", "id", "providerMetadata"},
    "text-delta": {"type", "id", "delta", "providerMetadata"},
    "text-end": {"type", "id", "providerMetadata"},
    "finish-step": {"type"},
    "finish": {"type", "finishReason", "messageMetadata"},
    "error": {"type", "errorText"},
    "data-*": {"type", "id", "data", "transient"},
}


def assert_known_chunk_keys(parts) -> None:
    for part in parts:
        if part == "[DONE]":
            continue
        kind = "data-*" if part["type"].startswith("data-") else part["type"]
        assert kind in CHUNK_KEYS, part
        assert set(part) <= CHUNK_KEYS[kind], part


def part_types(parts) -> list[str]:
    return [p if p == "[DONE]" else p["type"] for p in parts]


def status_stages(parts) -> list[str]:
    return [p["data"]["stage"] for p in of_type(parts, "data-status")]


def expected_shape(parts, *, stages_before: int, generation_status: bool) -> list[str]:
    deltas = len(of_type(parts, "text-delta"))
    return [
        "start", "start-step", *["data-status"] * stages_before, "data-retrieval", "text-start",
        *(["data-status"] if generation_status else []), *["text-delta"] * deltas, "text-end",
        "data-answer", "finish-step", "finish", "[DONE]",
    ]


def assert_spans_inside_their_text(citations) -> None:
    for citation in citations:
        for span in citation["spans"]:
            assert 0 <= span["text_start"] < span["text_end"] <= len(citation["text"])
            assert citation["text"][span["text_start"]:span["text_end"]] == span["text"]


# --- a complete answer ------------------------------------------------------------------------


def test_rag_answer_streams_every_part_in_order_and_is_stored_as_streamed(chat_kb):
    # given
    with live_chat_server() as base_url:
        # when
        response, parts = post_stream(base_url, {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION})

    # then: the protocol
    assert response.status_code == 200
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["content-type"].startswith("text/event-stream")
    assert part_types(parts) == expected_shape(parts, stages_before=4, generation_status=True)
    assert_known_chunk_keys(parts)
    assert status_stages(parts) == ["route", "prepare", "faq_search", "doc_search", "generation"]
    assert all(p["transient"] is True and p["data"]["message"] for p in of_type(parts, "data-status"))
    # The local model's answer is computed at once: its deltas leave together, in few parts.
    assert of_type(parts, "text-delta")
    assert {p["id"] for p in parts if isinstance(p, dict) and p["type"].startswith("text-")} == {"text-1"}

    start, retrieval, answer = parts[0], of_type(parts, "data-retrieval")[0], of_type(parts, "data-answer")[0]
    trace_id = retrieval["data"]["trace_id"]
    assert start["messageId"] == f"msg-{trace_id}"
    assert {"citations", "retrieval_results", "retrieval_trace", "trace_id", "route"} <= set(retrieval["data"])
    assert retrieval["data"]["route"] == "retrieval"
    assert retrieval["data"]["retrieval_trace"]["trace_id"] == trace_id
    assert retrieval["data"]["retrieval_results"], "the documents found are sent before the answer"
    data = answer["data"]
    assert set(data) == {
        "answer_confidence", "route", "hit_type", "intent", "trace_id", "conversation_id", "message_id",
        "citations", "retrieval",
    }
    assert (data["route"], data["hit_type"], data["trace_id"]) == ("retrieval", "rag", trace_id)
    confidence = data["answer_confidence"]
    assert 0 <= confidence["score"] <= 1 and confidence["label"] == LABELS[confidence["level"]]
    assert {"evidence_confidence", "generation_verification", "reasons", "signals"} <= set(confidence)

    # then: the text and its citations
    text = text_of(parts)
    assert RAG_ANSWER_FACT in text
    markers = CITATION_MARKER.findall(text)
    assert markers and all(a == b for a, b in markers)
    cited = {int(a) for a, _ in markers}
    citations = {c["number"]: c for c in data["citations"]}
    assert cited <= set(citations)
    assert {n for n, c in citations.items() if c["cited"]} == cited
    assert [c["number"] for c in retrieval["data"]["citations"]] == sorted(citations)
    assert_spans_inside_their_text(retrieval["data"]["citations"])
    assert_spans_inside_their_text(data["citations"])
    answer_lines = text.splitlines()
    for number in cited:
        line_spans = [s for s in citations[number]["spans"] if s["line"] >= 0]
        assert line_spans, f"cited source {number} has no supporting span"
        chunk = Chunk.objects.get(pk=line_spans[0]["chunk_id"])
        for span in line_spans:
            assert span["line"] < len(answer_lines)
            assert chunk.content[span["start"]:span["end"]] == span["text"]
    assert all(s["line"] == -1 for c in retrieval["data"]["citations"] for s in c["spans"])

    # then: what was stored is what was streamed
    message = Message.objects.get(pk=data["message_id"])
    assert (message.role, message.status, message.content) == ("assistant", MessageStatus.COMPLETE, text)
    assert str(message.conversation_id) == data["conversation_id"]
    assert retrieval["data"].get("conversation_id", data["conversation_id"]) == data["conversation_id"]
    assert str(message.trace_id) == trace_id
    assert message.evidence.citations == data["citations"]
    assert message.evidence.hit_type == "rag"
    trace = QueryTrace.objects.get(trace_id=trace_id)
    assert (trace.status, trace.route, trace.hit_type) == (TraceStatus.COMPLETED, "retrieval", "rag")
    assert trace.assistant_message_id == message.pk
    assert trace.first_token_ms is not None and trace.first_token_ms <= trace.total_ms
    user_message = Message.objects.filter(conversation_id=message.conversation_id, role="user").get()
    assert user_message.content == RAG_QUESTION


ROUTES = [
    pytest.param(GREETING, "direct_answer", "direct_answer", ["route"], id="direct-greeting"),
    pytest.param(FAQ_QUESTION, "faq_exact", "faq_exact", ["route"], id="faq-exact"),
    pytest.param(FAQ_NEAR_QUESTION, "retrieval", "faq_direct", ["route", "prepare", "faq_search"], id="faq-direct"),
    pytest.param(
        OFF_TOPIC_QUESTION, "retrieval", "insufficient_context", ["route", "prepare", "faq_search", "doc_search"],
        id="insufficient-context",
    ),
]


@pytest.mark.parametrize("question,route,hit_type,stages", ROUTES)
def test_every_route_streams_without_a_model_call(chat_kb, openai_provider, question, route, hit_type, stages):
    # given: a remote chat model, so any generation call would reach the fake provider
    with live_chat_server() as base_url:
        # when
        response, parts = post_stream(base_url, {"knowledge_base_id": chat_kb.slug, "question": question})

    # then
    assert response.status_code == 200
    assert part_types(parts) == expected_shape(parts, stages_before=len(stages), generation_status=False)
    assert_known_chunk_keys(parts)
    assert status_stages(parts) == stages
    data = of_type(parts, "data-answer")[0]["data"]
    assert (data["route"], data["hit_type"]) == (route, hit_type)
    text = text_of(parts)
    if hit_type == "direct_answer":
        assert chat_kb.name in text
        assert data["citations"] == []
    elif hit_type in ("faq_exact", "faq_direct"):
        assert text == FAQ_ANSWER
        assert [(c["kind"], c["title"]) for c in data["citations"]] == [("faq", FAQ_QUESTION)]
    else:
        assert text.startswith("根据当前知识库无法确定")
        assert data["citations"] == []
    assert Message.objects.get(pk=data["message_id"]).content == text
    assert QueryTrace.objects.get(trace_id=data["trace_id"]).hit_type == hit_type
    assert streamed_chat_requests(openai_provider) == []
    if route == "direct_answer" or hit_type.startswith("faq"):
        assert openai_provider.requests() == [], "nothing of these paths goes to the provider"


def test_rag_answer_of_a_remote_model_streams_its_deltas(chat_kb, openai_provider):
    # given: the model writes a bare citation marker, split across deltas that arrive apart
    # (deltas waiting together are sent as one part)
    openai_provider.enqueue("openai.chat", Answer(deltas=("星河X3 的保修期", "为 24 个月", "[来源", " 1]", "。"),
                                                  delay=0.1))
    with live_chat_server() as base_url:
        # when
        response, parts = post_stream(
            base_url, {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION, "enable_query_rewrite": False}
        )

    # then
    assert response.status_code == 200
    (request,) = streamed_chat_requests(openai_provider)
    assert request.body["model"] == "fake-chat"
    assert RAG_QUESTION in request.body["messages"][-1]["content"]
    text = text_of(parts)
    assert text == "星河X3 的保修期为 24 个月[来源 1](citation://1)。"
    assert len(of_type(parts, "text-delta")) > 1
    data = of_type(parts, "data-answer")[0]["data"]
    assert data["hit_type"] == "rag"
    assert [c["number"] for c in data["citations"] if c["cited"]] == [1]
    assert QueryTrace.objects.get(trace_id=data["trace_id"]).model_name


# --- errors before the stream: JSON with a code -----------------------------------------------


def _bodies(kb_slug: str, *, internal: str, restricted: str, other_conversation: str):
    return {
        "unknown_kb": ({"knowledge_base_id": "no-such-kb", "question": "年假"}, 404, "knowledge_base_not_found"),
        "internal_kb_anonymous": ({"knowledge_base_id": internal, "question": "年假"}, 404, "knowledge_base_not_found"),
        "restricted_kb_non_member": (
            {"knowledge_base_id": restricted, "question": "年假"}, 404, "knowledge_base_not_found",
        ),
        "empty_question": ({"knowledge_base_id": kb_slug, "question": "  \n "}, 400, "question_empty"),
        "oversized_question": ({"knowledge_base_id": kb_slug, "question": "问" * 2001}, 400, "question_too_long"),
        "no_question": ({"knowledge_base_id": kb_slug}, 400, "question_empty"),
        "no_kb": ({"question": "年假"}, 400, "invalid_request"),
        "messages_not_a_list": ({"knowledge_base_id": kb_slug, "messages": "年假"}, 400, "invalid_messages"),
        "parts_not_a_list": (
            {"knowledge_base_id": kb_slug, "messages": [{"id": "m1", "role": "user", "parts": "年假"}]},
            400, "invalid_messages",
        ),
        "message_without_role": (
            {"knowledge_base_id": kb_slug, "messages": [{"id": "m1", "parts": [{"type": "text", "text": "年假"}]}]},
            400, "invalid_messages",
        ),
        "no_user_message": (
            {"knowledge_base_id": kb_slug, "id": "chat-1",
             "messages": [{"id": "m1", "role": "assistant", "parts": [{"type": "text", "text": "您好"}]}]},
            400, "question_empty",
        ),
        "another_users_conversation": (
            {"knowledge_base_id": kb_slug, "question": "年假", "conversation_id": other_conversation},
            404, "conversation_not_found",
        ),
    }


def test_refusals_before_the_stream_are_json_errors(member_user, staff_user, engineers_group):
    # given: knowledge bases of every visibility, and a conversation of someone else
    from rest_framework.authtoken.models import Token

    public = make_kb(visibility=Visibility.PUBLIC)
    internal = make_kb(visibility=Visibility.INTERNAL)
    restricted = make_kb(visibility=Visibility.RESTRICTED, groups=[engineers_group])
    others = Conversation.objects.create(knowledge_base=public, user=staff_user, title="别人的会话")
    cases = _bodies(public.slug, internal=internal.slug, restricted=restricted.slug, other_conversation=str(others.pk))
    member_token = {"Authorization": f"Token {Token.objects.create(user=member_user).key}"}
    signed_in = {"restricted_kb_non_member", "another_users_conversation"}

    # when: every request is refused by one server
    seen = {}
    with live_chat_server() as base_url:
        for case, (body, _, _) in cases.items():
            response, parts = post_stream(base_url, body, headers=member_token if case in signed_in else None)
            payload = response.json() if response.headers["content-type"] == "application/json" else {}
            seen[case] = (response.status_code, payload.get("code"), bool(payload.get("detail")), parts)

    # then: each as JSON with its code and a message, before any stream and with nothing stored
    assert seen == {case: (status, code, True, []) for case, (_, status, code) in cases.items()}
    assert not Message.objects.exists() and not QueryTrace.objects.exists()


def test_malformed_json_wrong_method_and_bad_token_are_json_errors():
    with live_chat_server() as base_url, httpx.Client(base_url=base_url, timeout=30) as client:
        malformed = client.post("/api/chat/stream", content=b'{"question": ', headers={"Content-Type": "application/json"})
        not_an_object = client.post("/api/chat/stream", json=["年假"])
        wrong_method = client.get("/api/chat/stream")
        bad_token = client.post("/api/chat/stream", json={"knowledge_base_id": "any", "question": GREETING},
                                headers={"Authorization": "Token nope"})
    assert (malformed.status_code, malformed.json()["code"]) == (400, "invalid_json")
    assert (not_an_object.status_code, not_an_object.json()["code"]) == (400, "invalid_json")
    assert (wrong_method.status_code, wrong_method.json()["code"]) == (405, "method_not_allowed")
    assert (bad_token.status_code, bad_token.json()["code"]) == (401, "authentication_failed")


def test_session_requests_need_the_csrf_token(chat_kb, member_user):
    # given: a signed-in browser session
    cookies = session_cookie_for(member_user)
    csrf_cookie, csrf_header = csrf_pair()
    body = {"knowledge_base_id": chat_kb.slug, "question": GREETING}
    with live_chat_server() as base_url:
        # when
        without, _ = post_stream(base_url, body, cookies=cookies)
        wrong, _ = post_stream(base_url, body, cookies={**cookies, **csrf_cookie}, headers={"X-CSRFToken": "x" * 32})
        with_token, parts = post_stream(base_url, body, cookies={**cookies, **csrf_cookie}, headers=csrf_header)

    # then
    assert (without.status_code, without.json()["code"]) == (403, "csrf_failed")
    assert (wrong.status_code, wrong.json()["code"]) == (403, "csrf_failed")
    assert with_token.status_code == 200 and parts[-1] == "[DONE]"
    conversation = Conversation.objects.get(pk=of_type(parts, "data-answer")[0]["data"]["conversation_id"])
    assert conversation.user == member_user


def test_a_signed_in_browsers_body_that_is_not_json_is_refused_as_the_json_endpoint_refuses_it(member_user):
    # given: a signed-in browser with its CSRF token, and a knowledge base
    kb = make_kb(visibility=Visibility.PUBLIC)
    csrf_cookie, csrf_header = csrf_pair()
    cookies = {**session_cookie_for(member_user), **csrf_cookie}
    question = json.dumps({"knowledge_base_id": kb.slug, "question": GREETING}).encode()
    with live_chat_server() as base_url, httpx.Client(base_url=base_url, cookies=cookies, timeout=30) as client:
        # when: JSON sent as text/plain (what a cross-site form can send), and malformed JSON
        plain, plain_json_endpoint = (
            client.post(path, content=question, headers={**csrf_header, "Content-Type": "text/plain"})
            for path in ("/api/chat/stream", "/api/chat")
        )
        malformed, not_strict = (
            client.post("/api/chat/stream", content=body, headers={**csrf_header, "Content-Type": "application/json"})
            for body in (b'{"question": ', b'{"knowledge_base_id": "x", "question": NaN}')
        )

    # then: the API's JSON errors, the stream's as the JSON endpoint's, and nothing asked
    assert (plain.status_code, plain.json()["code"]) == (415, "unsupported_media_type")
    assert (plain.status_code, plain.json()) == (plain_json_endpoint.status_code, plain_json_endpoint.json())
    assert (malformed.status_code, malformed.json()["code"]) == (400, "invalid_json")
    assert (not_strict.status_code, not_strict.json()["code"]) == (400, "invalid_json")
    assert not Message.objects.exists()

def test_vector_store_down_is_a_503_json_error_and_a_failed_trace(chat_kb, settings):
    # given: Milvus is unreachable for the server (a closed port)
    settings.MILVUS_URI = "http://127.0.0.1:9"
    with live_chat_server() as base_url:
        # when
        response, parts = post_stream(base_url, {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION})

    # then
    assert (response.status_code, response.headers["content-type"]) == (503, "application/json")
    body = response.json()
    assert body["code"] == "retrieval_unavailable"
    assert {e["channel"].split(":")[0] for e in body["channel_errors"]} == {"dense", "sparse"}
    assert "127.0.0.1:9" not in response.text
    assert parts == []
    trace = QueryTrace.objects.get()
    assert (trace.status, trace.error_code) == (TraceStatus.FAILED, "retrieval_unavailable")
    assert not ChatEvidence.objects.exists()


@contextmanager
def table_renamed(model_or_table):
    """The table is gone for the duration (a real database error for whoever queries it)."""
    table = model_or_table if isinstance(model_or_table, str) else model_or_table._meta.db_table
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {quote(table)} RENAME TO {quote(table + '_away')}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {quote(table + '_away')} RENAME TO {quote(table)}")


def test_facts_store_failure_is_a_503_json_error(chat_kb):
    # given: which documents of the active version are ready cannot be read
    with live_chat_server() as base_url, table_renamed(KnowledgeBaseVersion.documents.through):
        # when
        response, parts = post_stream(base_url, {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION})

    # then
    assert (response.status_code, response.headers["content-type"]) == (503, "application/json")
    body = response.json()
    assert body["code"] == "facts_unavailable"
    assert "_away" not in response.text and "no such table" not in response.text.lower()
    assert parts == []
    assert QueryTrace.objects.get().status == TraceStatus.FAILED


# --- errors after the stream started ----------------------------------------------------------


def test_model_dying_midway_ends_the_stream_with_a_stable_error_part(chat_kb, openai_provider):
    # given: the model sends three deltas, then an error event
    openai_provider.enqueue(
        "openai.chat", Answer(text="星河X3 的保修期为 24 个月，保修期内免费更换，详见保修条款。", error_after=3)
    )
    with live_chat_server() as base_url:
        # when
        response, parts = post_stream(
            base_url, {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION, "enable_query_rewrite": False}
        )

    # then: the stream ends with an error part, never a finish
    assert response.status_code == 200
    types = part_types(parts)
    assert types[-3:] == ["text-end", "error", "[DONE]"]
    assert_known_chunk_keys(parts)
    assert "data-answer" not in types and "finish" not in types
    error = of_type(parts, "error")[0]
    assert error == {"type": "error", "errorText": GENERATION_FAILED_TEXT}
    for secret in ("fake stream failure", "sk-test", "Traceback", "openai"):
        assert secret not in json.dumps(parts, ensure_ascii=False)
    delivered = text_of(parts)
    assert delivered, "the deltas before the failure were streamed"

    # then: the turn is stored with only the delivered text, and no evidence
    trace_id = of_type(parts, "data-retrieval")[0]["data"]["trace_id"]
    trace = QueryTrace.objects.get(trace_id=trace_id)
    assert trace.status == TraceStatus.FAILED
    assert trace.error_code
    message = trace.assistant_message
    assert (message.role, message.status, message.content) == ("assistant", MessageStatus.ERROR, delivered)
    assert not ChatEvidence.objects.filter(message=message).exists()
