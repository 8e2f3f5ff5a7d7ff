"""The JSON side of chat: `POST /api/chat` (one turn as one object) and the history endpoints,
on real components (ingestion, Milvus Lite, the local provider, the database)."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone
from rest_framework.test import APIClient

from chat.models import Conversation, QueryTrace, TraceStatus
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.models import Document, KnowledgeBaseVersion, Visibility
from tests.chat.conftest import (
    FAQ_QUESTION,
    GREETING,
    IT_GUIDE,
    PRODUCTS,
    RAG_ANSWER_FACT,
    RAG_QUESTION,
    publish_kb,
)
from tests.conftest import api_client_for, make_kb

pytestmark = pytest.mark.django_db(transaction=True)

TURN_KEYS = {
    "trace_id", "conversation_id", "user_message_id", "message_id", "answer", "route", "hit_type", "intent",
    "citations", "answer_confidence", "retrieval", "kb_version", "clarify",
}
# What the SSE `data-answer` part carries: the JSON turn has all of it, in the same shapes.
STREAM_ANSWER_KEYS = {
    "answer_confidence", "route", "hit_type", "intent", "trace_id", "conversation_id", "message_id", "citations",
    "retrieval",
}


def ask(client: APIClient, kb, question: str, **extra):
    return client.post("/api/chat", {"knowledge_base_id": kb.slug, "question": question, **extra}, format="json")


def ui_message(message_id: str, role: str, text: str) -> dict:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}]}


def listed(client: APIClient, **params) -> list[str]:
    response = client.get("/api/chat/conversations", params)
    assert response.status_code == 200, response.content
    return [c["id"] for c in response.json()["results"]]


# --- POST /api/chat -----------------------------------------------------------------------------


def test_json_turn_has_the_shape_of_the_streamed_result(chat_kb, member_api):
    # when
    response = ask(member_api, chat_kb, RAG_QUESTION)

    # then
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == TURN_KEYS
    assert STREAM_ANSWER_KEYS <= set(body)
    assert (body["route"], body["hit_type"], body["kb_version"]) == ("retrieval", "rag", 1)
    assert RAG_ANSWER_FACT in body["answer"]
    assert "[来源 1](citation://1)" in body["answer"]
    assert [c["number"] for c in body["citations"] if c["cited"]] == [1]
    assert body["answer_confidence"]["level"] in ("high", "medium", "low")
    assert {"stage_timings_ms", "first_token_ms", "cache", "sources"} <= set(body["retrieval"])
    trace = QueryTrace.objects.get(trace_id=body["trace_id"])
    assert trace.status == TraceStatus.COMPLETED
    assert trace.assistant_message.content == body["answer"]
    assert trace.assistant_message.evidence.citations == body["citations"]


def test_json_turn_accepts_the_ai_sdk_body(chat_kb, member_api):
    # when: the body DefaultChatTransport sends, with the knowledge base in `body`
    response = member_api.post(
        "/api/chat",
        {"id": "chat-1", "trigger": "submit-message", "messageId": None, "knowledge_base_id": chat_kb.slug,
         "messages": [ui_message("m1", "user", FAQ_QUESTION)]},
        format="json",
    )

    # then
    assert response.status_code == 200, response.content
    assert response.json()["hit_type"] == "faq_exact"
    assert Conversation.objects.get(pk=response.json()["conversation_id"]).client_id == "chat-1"


@pytest.mark.parametrize(
    "body,status,code",
    [
        ({"knowledge_base_id": "no-such-kb", "question": "年假"}, 404, "knowledge_base_not_found"),
        ({"question": "   "}, 400, "question_empty"),
        ({"question": "问" * 2001}, 400, "question_too_long"),
        ({"messages": {"role": "user"}}, 400, "invalid_messages"),
        ({"messages": [{"id": "m1", "role": "user", "parts": {"type": "text"}}]}, 400, "invalid_messages"),
        ({"messages": [ui_message("m1", "assistant", "您好")]}, 400, "question_empty"),
        ({"question": "年假", "conversation_id": "7f0c1e1a-0000-4000-8000-000000000000"}, 404, "conversation_not_found"),
    ],
    ids=["unknown-kb", "empty", "oversized", "messages-not-a-list", "parts-not-a-list", "no-user-message",
         "unknown-conversation"],
)
def test_json_turn_refusals_are_json_errors_with_a_code(member_api, body, status, code):
    kb = make_kb(visibility=Visibility.PUBLIC)
    response = member_api.post("/api/chat", {"knowledge_base_id": kb.slug, **body}, format="json")
    assert response.status_code == status, response.content
    assert response.json()["code"] == code
    assert response.json()["detail"]
    assert not Conversation.objects.exists()


def test_json_turn_hides_an_internal_kb_from_anonymous_clients(anonymous_api):
    kb = make_kb(visibility=Visibility.INTERNAL)
    response = ask(anonymous_api, kb, GREETING)
    assert (response.status_code, response.json()["code"]) == (404, "knowledge_base_not_found")


# --- history ------------------------------------------------------------------------------------


def test_conversation_list_shows_only_the_requesters_own(chat_kb, member_user, engineer_user):
    # given: two users and two anonymous browsers each asked once
    alice, bob = api_client_for(member_user), api_client_for(engineer_user)
    first_browser, second_browser = APIClient(), APIClient()
    owned = {
        name: ask(client, chat_kb, GREETING).json()["conversation_id"]
        for name, client in [("alice", alice), ("bob", bob), ("first", first_browser), ("second", second_browser)]
    }

    # when / then
    assert listed(alice) == [owned["alice"]]
    assert listed(bob) == [owned["bob"]]
    assert listed(first_browser) == [owned["first"]]
    assert listed(second_browser) == [owned["second"]]
    assert listed(APIClient()) == [], "a browser without a session owns nothing"
    assert listed(alice, knowledge_base_id=chat_kb.slug) == [owned["alice"]]
    assert listed(alice, knowledge_base_id="another-kb") == []


def test_conversation_list_is_paginated_newest_first(chat_kb, member_api):
    ids = [ask(member_api, chat_kb, GREETING).json()["conversation_id"] for _ in range(3)]
    body = member_api.get("/api/chat/conversations").json()
    assert body["count"] == 3 and {"next", "previous"} <= set(body)
    assert [c["id"] for c in body["results"]] == ids[::-1]
    item = body["results"][0]
    assert set(item) == {"id", "knowledge_base_id", "title", "created_at", "updated_at"}
    assert (item["knowledge_base_id"], item["title"]) == (chat_kb.slug, GREETING)


def test_api_times_are_iso_8601_in_the_deployments_zone(chat_kb, member_api):
    # given: a conversation with messages
    turn = ask(member_api, chat_kb, GREETING).json()
    # when: its times are read from the list, the detail and a knowledge base of the API
    listed = member_api.get("/api/chat/conversations").json()["results"][0]
    detail = member_api.get(f"/api/chat/conversations/{turn['conversation_id']}").json()
    kb = member_api.get(f"/api/knowledge-bases/{chat_kb.slug}/").json()
    stamps = [listed["created_at"], listed["updated_at"], detail["created_at"], detail["updated_at"],
              *(message["created_at"] for message in detail["messages"]), kb["created_at"]]
    # then: every one carries the offset of settings.TIME_ZONE, none UTC's
    offset = timezone.localtime().strftime("%z")
    expected = f"{offset[:3]}:{offset[3:]}"
    assert offset != "+0000", "the test needs a deployment zone other than UTC"
    assert all(datetime.fromisoformat(stamp).utcoffset() is not None for stamp in stamps)
    assert {stamp[-6:] for stamp in stamps} == {expected}, stamps


def test_conversation_detail_returns_messages_with_their_evidence(chat_kb, member_api, engineer_user):
    # given
    turn = ask(member_api, chat_kb, RAG_QUESTION).json()
    failed_follow_up = ask(member_api, chat_kb, "", conversation_id=turn["conversation_id"])
    assert failed_follow_up.status_code == 400

    # when
    response = member_api.get(f"/api/chat/conversations/{turn['conversation_id']}")

    # then
    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["knowledge_base_id"]) == (turn["conversation_id"], chat_kb.slug)
    user_message, answer = body["messages"]
    assert (user_message["role"], user_message["content"], user_message["evidence"]) == ("user", RAG_QUESTION, None)
    assert (answer["id"], answer["role"], answer["status"]) == (turn["message_id"], "assistant", "complete")
    assert (answer["content"], answer["trace_id"]) == (turn["answer"], turn["trace_id"])
    evidence = answer["evidence"]
    assert (evidence["route"], evidence["hit_type"]) == ("retrieval", "rag")
    assert evidence["citations"] == turn["citations"]
    assert evidence["answer_confidence"] == turn["answer_confidence"]
    assert evidence["retrieval_results"] and evidence["retrieval_trace"]["trace_id"] == turn["trace_id"]

    # then: nobody else may read it
    other = api_client_for(engineer_user).get(f"/api/chat/conversations/{turn['conversation_id']}")
    anonymous = APIClient().get(f"/api/chat/conversations/{turn['conversation_id']}")
    assert (other.status_code, other.json()["code"]) == (404, "conversation_not_found")
    assert (anonymous.status_code, anonymous.json()["code"]) == (404, "conversation_not_found")


def test_reload_restores_the_citations_of_the_time_without_retrieving(milvus, run_tasks, media_root, staff_user,
                                                                      member_api):
    # given: v1 had the IT guide, v2 added the product manual, and the answer cited the manual
    kb = publish_kb(actor=staff_user, documents={"IT 服务台指南.md": IT_GUIDE})
    document_services.upload_documents(kb=kb, actor=staff_user, files=[SimpleUploadedFile("产品手册.md", PRODUCTS.encode())])
    v2 = KnowledgeBaseVersion.objects.get(knowledge_base=kb, number=2)
    assert v2.status == "ready"
    catalog_services.activate_version(version=v2, actor=staff_user)
    manual = Document.objects.get(knowledge_base=kb, title="产品手册")
    turn = ask(member_api, kb, RAG_QUESTION).json()
    assert turn["hit_type"] == "rag"
    assert {c["document_id"] for c in turn["citations"] if c["cited"]} == {manual.pk}

    # when: the version is rolled back, so retrieval can no longer find the manual
    catalog_services.rollback_version(kb=kb, actor=staff_user, reason="撤回产品手册")
    search = member_api.post(
        "/api/retrieval/search", {"knowledge_base_id": kb.slug, "question": RAG_QUESTION, "top_k": 10}, format="json"
    )
    assert search.status_code == 200
    assert manual.pk not in {r["document_id"] for r in search.json()}
    traces_before = QueryTrace.objects.count()
    response = member_api.get(f"/api/chat/conversations/{turn['conversation_id']}")

    # then: the answer comes back with the evidence it was shown with
    assert response.status_code == 200
    answer = response.json()["messages"][-1]
    assert answer["content"] == turn["answer"]
    assert answer["evidence"]["citations"] == turn["citations"]
    assert {r["document_id"] for r in answer["evidence"]["retrieval_results"]} >= {manual.pk}
    assert QueryTrace.objects.count() == traces_before, "a reload asks nothing again"


def test_follow_up_with_conversation_id_continues_the_conversation(chat_kb, member_api):
    first = ask(member_api, chat_kb, RAG_QUESTION).json()
    follow_up = ask(member_api, chat_kb, "那 X5 呢？", conversation_id=first["conversation_id"]).json()
    assert follow_up["conversation_id"] == first["conversation_id"]
    assert follow_up["retrieval"]["history_rewrite_used"] is True
    assert "36 个月" in follow_up["answer"]


def test_ai_sdk_chat_id_is_one_conversation_per_owner(chat_kb, member_user, engineer_user):
    # given: two users whose clients happen to use the same chat id
    alice, bob = api_client_for(member_user), api_client_for(engineer_user)

    def send(client, messages):
        body = {"id": "shared-chat-id", "trigger": "submit-message", "knowledge_base_id": chat_kb.slug,
                "messages": messages}
        response = client.post("/api/chat", body, format="json")
        assert response.status_code == 200, response.content
        return response.json()

    # when
    alice_first = send(alice, [ui_message("a1", "user", RAG_QUESTION)])
    bob_first = send(bob, [ui_message("b1", "user", RAG_QUESTION)])
    alice_second = send(alice, [ui_message("a1", "user", RAG_QUESTION),
                                ui_message("a2", "assistant", alice_first["answer"]),
                                ui_message("a3", "user", "那 X5 呢？")])

    # then
    assert alice_second["conversation_id"] == alice_first["conversation_id"] != bob_first["conversation_id"]
    assert "36 个月" in alice_second["answer"]
    assert Conversation.objects.get(pk=alice_first["conversation_id"]).messages.count() == 4
    assert Conversation.objects.get(pk=bob_first["conversation_id"]).messages.count() == 2
