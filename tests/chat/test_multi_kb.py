"""One question over several knowledge bases (`knowledge_base_ids`), on real components: each
base checked for access, each read through its own active version and cache epoch, one ranking
of their evidence, every citation naming its base, through JSON, SSE and the WebSocket."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from chat.models import Conversation, Message, QueryTrace
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.models import KnowledgeBaseVersion, Visibility
from tests.chat.conftest import (
    HANDBOOK,
    IT_GUIDE,
    PRODUCTS,
    RAG_ANSWER_FACT,
    RAG_QUESTION,
    live_chat_server,
    of_type,
    post_stream,
    publish_kb,
    ws_url,
)

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCT_FAQ = {"question": "星河X5 支持哪种 Wi-Fi？", "answer": "星河X5 支持 Wi-Fi 7。"}
DRAFT_ONLY = "# 星河X9\n\n星河X9 是一款万兆路由器，保修期为 60 个月，支持上门更换。\n"
DRAFT_QUESTION = "星河X9 的保修期是多久？"


@pytest.fixture
def hr_kb(milvus, run_tasks, media_root, staff_user):
    return publish_kb(actor=staff_user, slug="hr", documents={"员工手册.md": HANDBOOK}, faqs=[])


@pytest.fixture
def products_kb(milvus, run_tasks, media_root, staff_user):
    return publish_kb(actor=staff_user, slug="products", documents={"产品手册.md": PRODUCTS}, faqs=[PRODUCT_FAQ])


@pytest.fixture
def engineering_kb(milvus, run_tasks, media_root, staff_user, engineers_group):
    return publish_kb(actor=staff_user, slug="engineering", visibility=Visibility.RESTRICTED,
                      groups=[engineers_group], documents={"IT 服务台指南.md": IT_GUIDE}, faqs=[])


def ask(client, question: str, *slugs: str, **extra):
    return client.post("/api/chat", {"knowledge_base_ids": list(slugs), "question": question, **extra}, format="json")


def test_a_question_over_two_knowledge_bases_cites_the_one_that_holds_the_answer(hr_kb, products_kb, member_api):
    # when: asked in the handbook's conversation, with the product manual also chosen
    alone = ask(member_api, RAG_QUESTION, hr_kb.slug)
    both = ask(member_api, RAG_QUESTION, hr_kb.slug, products_kb.slug)

    # then: the handbook alone cannot answer; with both, the product manual's sentence is cited
    # and named, and the conversation stays the handbook's
    assert alone.status_code == 200 and RAG_ANSWER_FACT not in alone.json()["answer"]
    assert both.status_code == 200, both.content
    body = both.json()
    assert RAG_ANSWER_FACT in body["answer"]
    cited = [c for c in body["citations"] if c["cited"]]
    assert cited and {c["knowledge_base"] for c in cited} == {products_kb.slug}
    assert {c["knowledge_base_name"] for c in cited} == {products_kb.name}
    assert Conversation.objects.get(pk=body["conversation_id"]).knowledge_base_id == hr_kb.pk
    trace = QueryTrace.objects.get(trace_id=body["trace_id"]).full_details
    scopes = trace["documents"]["knowledge_bases"]
    assert [(s["kb_id"], s["version"]) for s in scopes] == [
        (hr_kb.pk, hr_kb.active_version.number), (products_kb.pk, products_kb.active_version.number)
    ]
    assert trace["documents"]["ready_document_count"] == 2


def test_citations_name_their_knowledge_base_for_one_too(products_kb, member_api):
    body = ask(member_api, RAG_QUESTION, products_kb.slug).json()
    assert body["citations"] and {c["knowledge_base"] for c in body["citations"]} == {products_kb.slug}


def test_a_hidden_knowledge_base_fails_the_question_exactly_like_a_missing_one(
    hr_kb, engineering_kb, member_api, engineer_user
):
    from tests.conftest import api_client_for

    # when: a member who may not read the engineering base names it, then a slug that does not exist
    hidden = ask(member_api, "VPN 空闲多久会断开？", hr_kb.slug, engineering_kb.slug)
    missing = ask(member_api, "VPN 空闲多久会断开？", hr_kb.slug, "no-such-kb")
    member_stored = Message.objects.count()
    allowed = ask(api_client_for(engineer_user), "VPN 空闲多久会断开？", hr_kb.slug, engineering_kb.slug)

    # then: the same 404 but for the name the caller gave, nothing stored; an engineer is answered
    assert (hidden.status_code, hidden.json()["code"]) == (404, "knowledge_base_not_found")
    assert hidden.json()["detail"].replace(engineering_kb.slug, "X") == missing.json()["detail"].replace("no-such-kb", "X")
    assert member_stored == 0
    assert allowed.status_code == 200 and "30 分钟" in allowed.json()["answer"]


def test_each_knowledge_base_answers_from_its_own_active_version_and_epoch(hr_kb, products_kb, member_api, staff_user):
    # given: the product manual has a draft that adds 星河X9, not yet published
    document_services.upload_documents(kb=products_kb, actor=staff_user,
                              files=[SimpleUploadedFile("星河X9.md", DRAFT_ONLY.encode())])
    draft = KnowledgeBaseVersion.objects.filter(knowledge_base=products_kb).order_by("-number").first()
    assert draft.status == "ready"

    # when: asked over both before publishing (the combined answer is cached), then after
    before = ask(member_api, DRAFT_QUESTION, hr_kb.slug, products_kb.slug).json()
    catalog_services.activate_version(version=draft, actor=staff_user, reason="发布 X9")
    after = ask(member_api, DRAFT_QUESTION, hr_kb.slug, products_kb.slug).json()

    # then: the draft never answered; its publication moved the product manual's epoch, so the
    # cached combined result was not served again
    assert "60 个月" not in before["answer"]
    assert all(c["title"] != "星河X9" for c in before["citations"])
    assert "60 个月" in after["answer"], after["answer"]
    assert {c["knowledge_base"] for c in after["citations"] if c["cited"]} == {products_kb.slug}


def test_an_faq_of_another_knowledge_base_answers_exactly(hr_kb, products_kb, member_api):
    body = ask(member_api, PRODUCT_FAQ["question"], hr_kb.slug, products_kb.slug).json()
    assert body["hit_type"] == "faq_exact"
    assert body["answer"] == PRODUCT_FAQ["answer"]
    assert [c["knowledge_base"] for c in body["citations"]] == [products_kb.slug]


def test_more_knowledge_bases_than_allowed_is_a_clear_400(hr_kb, products_kb, member_api, settings):
    settings.RAG_MAX_KNOWLEDGE_BASES_PER_QUESTION = 2
    response = ask(member_api, RAG_QUESTION, hr_kb.slug, products_kb.slug, "third")
    assert (response.status_code, response.json()["code"]) == (400, "too_many_knowledge_bases")
    assert not Message.objects.exists()


def test_the_stream_and_the_socket_take_several_knowledge_bases(hr_kb, products_kb):
    body = {"knowledge_base_ids": [hr_kb.slug, products_kb.slug], "question": RAG_QUESTION}
    with live_chat_server() as base_url:
        # when: the AI SDK stream
        response, parts = post_stream(base_url, body)
        # and: the WebSocket
        from websockets.sync.client import connect

        with connect(ws_url(base_url), origin=base_url, proxy=None, open_timeout=30) as socket:
            socket.send(json.dumps({"type": "question", **body}))
            events = []
            while not events or events[-1]["type"] not in ("end", "error"):
                events.append(json.loads(socket.recv(timeout=60)))

    # then: both answer from the product manual and name it
    assert response.status_code == 200
    answer = of_type(parts, "data-answer")[0]["data"]
    assert {c["knowledge_base"] for c in answer["citations"] if c["cited"]} == {products_kb.slug}
    start, end = events[0], events[-1]
    assert start["type"] == "start" and start["knowledge_base_id"] == hr_kb.slug
    assert [kb["slug"] for kb in start["data_scope"]["knowledge_bases"]] == [hr_kb.slug, products_kb.slug]
    assert end["type"] == "end" and RAG_ANSWER_FACT in end["answer"]
    assert {c["knowledge_base"] for c in end["citations"] if c["cited"]} == {products_kb.slug}


@pytest.mark.parametrize("body", [
    {"knowledge_base_ids": ["hr", ""], "question": "年假"},
    {"knowledge_base_ids": "hr", "question": "年假"},
    {"knowledge_base_id": "hr", "document_ids": [1, "x"], "question": "年假"},
    {"question": "年假"},
])
def test_a_malformed_list_of_knowledge_bases_is_a_clear_400(member_api, body):
    # A list field reports its errors by item index: the first one is named whatever its index.
    response = member_api.post("/api/chat", body, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
    assert response.json()["detail"].split(":")[0] in {"knowledge_base_ids", "document_ids", "knowledge_base_id"}
    assert ": [" not in response.json()["detail"]


def test_the_same_in_a_multipart_form(member_api):
    response = member_api.post("/api/chat", {"knowledge_base_ids": ["\x86}", ""], "question": "年假"}, format="multipart")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
