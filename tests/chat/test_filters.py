"""Chat with metadata filters, on real components: the JSON API, the AI SDK stream and the
WebSocket take `filters`, document retrieval reads only the documents they admit, and the plan,
the stored trace and the trace admin say which were applied."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse
from websockets.sync.client import connect

from chat.models import Message, QueryTrace
from knowledge.documents import services as document_services
from knowledge.models import Document
from tests.chat.conftest import RAG_ANSWER_FACT, RAG_QUESTION, live_chat_server, of_type, post_stream, ws_url

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCTS_ONLY = [{"field": "部门", "op": "eq", "value": "产品部"}]
HR_ONLY = [{"field": "部门", "op": "eq", "value": "人力资源部"}]


@pytest.fixture
def departmental_chat_kb(chat_kb, staff_user):
    """The chat knowledge base with each document filed under its department."""
    for title, department in (("员工手册", "人力资源部"), ("产品手册", "产品部"), ("IT 服务台指南", "信息技术部")):
        document_services.set_document_attributes(
            document=Document.objects.get(knowledge_base=chat_kb, title=title), attributes={"部门": department},
            actor=staff_user,
        )
    return chat_kb


def ask(client, kb, question: str, **extra):
    return client.post("/api/chat", {"knowledge_base_id": kb.slug, "question": question, **extra}, format="json")


def documents_trace(body) -> dict:
    return QueryTrace.objects.get(trace_id=body["trace_id"]).full_details["documents"]


def test_the_json_api_answers_from_the_documents_the_filters_admit(departmental_chat_kb, member_api):
    # when
    response = ask(member_api, departmental_chat_kb, RAG_QUESTION, filters=PRODUCTS_ONLY)
    # then
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["hit_type"], RAG_ANSWER_FACT in body["answer"]) == ("rag", True)
    products = Document.objects.get(knowledge_base=departmental_chat_kb, title="产品手册")
    assert {c["document_id"] for c in body["citations"]} == {products.pk}
    assert body["retrieval"]["plan"]["filters"] == [{"field": "attributes.部门", "op": "eq", "value": "产品部"}]
    trace = documents_trace(body)
    assert trace["filters"] == body["retrieval"]["plan"]["filters"]
    assert (trace["filter_admitted_count"], trace["filter_ready_count"]) == (1, 3)


def test_a_question_whose_answer_the_filters_leave_out_is_not_answered_from_other_documents(
    departmental_chat_kb, member_api
):
    # when: the product question, within HR's documents only
    body = ask(member_api, departmental_chat_kb, RAG_QUESTION, filters=HR_ONLY).json()
    # then
    assert body["hit_type"] == "insufficient_context"
    assert RAG_ANSWER_FACT not in body["answer"]
    assert documents_trace(body)["filter_admitted_count"] == 1


def test_filters_that_admit_nothing_decline_with_that_reason(departmental_chat_kb, member_api):
    body = ask(member_api, departmental_chat_kb, RAG_QUESTION, filters=[{"field": "部门", "op": "eq", "value": "财务部"}]).json()
    assert body["hit_type"] == "insufficient_context"
    assert body["retrieval"]["insufficient_context_reason"] == "no_document_matches_filters"
    assert documents_trace(body)["empty_reason"] == "no_document_matches_filters"


def test_a_bad_filter_is_a_clear_400_and_nothing_is_stored(departmental_chat_kb, member_api):
    response = ask(member_api, departmental_chat_kb, RAG_QUESTION, filters=[{"field": "部门", "op": "contains", "value": "产"}])
    assert (response.status_code, response.json()["code"]) == (400, "invalid_filter")
    assert "第 1 个筛选条件" in response.json()["detail"]
    assert not Message.objects.exists()


def test_the_trace_admin_shows_the_filters_in_words(departmental_chat_kb, member_api, client, staff_user):
    # given
    body = ask(member_api, departmental_chat_kb, RAG_QUESTION,
               filters=[*PRODUCTS_ONLY, {"field": "file_type", "op": "in", "value": ["md", "pdf"]}]).json()
    trace = QueryTrace.objects.get(trace_id=body["trace_id"])
    client.force_login(staff_user)
    # when
    page = client.get(reverse("admin:chat_querytrace_change", args=[trace.pk])).content.decode()
    # then
    assert "元数据筛选" in page
    assert "部门 = 产品部" in page and "文件类型 是 md、pdf 之一" in page


def test_the_stream_and_the_socket_take_filters(departmental_chat_kb):
    body = {"knowledge_base_id": departmental_chat_kb.slug, "question": RAG_QUESTION, "filters": PRODUCTS_ONLY}
    refused_body = {**body, "filters": [{"field": "title", "op": "range", "gte": "a"}]}
    with live_chat_server() as base_url:
        # when: the AI SDK stream
        response, parts = post_stream(base_url, body)
        refused, _parts = post_stream(base_url, refused_body)
        # and: the WebSocket, one good question and one bad one on the same socket
        with connect(ws_url(base_url), origin=base_url, proxy=None, open_timeout=30) as socket:
            socket.send(json.dumps({"type": "question", **body}))
            events = []
            while not events or events[-1]["type"] not in ("end", "error"):
                events.append(json.loads(socket.recv(timeout=60)))
            socket.send(json.dumps({"type": "question", **refused_body}))
            error = json.loads(socket.recv(timeout=60))

    # then: the stream
    assert response.status_code == 200
    retrieval = of_type(parts, "data-retrieval")[0]["data"]
    assert retrieval["retrieval_trace"]["documents"]["filters"] == [
        {"field": "attributes.部门", "op": "eq", "value": "产品部"}]
    assert RAG_ANSWER_FACT in "".join(p["delta"] for p in of_type(parts, "text-delta"))
    assert (refused.status_code, refused.json()["code"]) == (400, "invalid_filter")
    # and: the socket
    end = events[-1]
    assert end["type"] == "end" and RAG_ANSWER_FACT in end["answer"]
    assert end["retrieval"]["plan"]["filters"] == [{"field": "attributes.部门", "op": "eq", "value": "产品部"}]
    assert (error["type"], error["code"]) == ("error", "invalid_filter")
