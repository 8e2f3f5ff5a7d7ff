"""A chat turn over a knowledge base that switched web search on: web pages found by the fake MCP
search server are cited as web sources (title, site, address, kind "web"), kept only in the
turn's evidence; a knowledge base with the switch off never searches the web.

Through `POST /api/chat` on the real factory path (database facts, the local provider); the
vectors come from an in-memory store named by RAG_VECTOR_STORE (`tests.fakes.memory_store`), so
no Milvus is started.
"""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from chat.models import ChatEvidence, QueryTrace
from tests.fakes.memory_store import memory_store, publish_chunks  # noqa: F401
from tests.fakes.web_search import mcp_search_server, mcp_web_search  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "星河X3 的保修期是多久？"
PRODUCT_TEXT = "星河X3 是一款 Wi-Fi 6 路由器，推荐覆盖面积 120 平方米，支持 Mesh 组网。"
WARRANTY_URL = "https://support.example.com/x3/warranty"


def test_a_turn_cites_a_web_page_as_a_web_source(mcp_web_search, memory_store, staff_user, anonymous_api):
    # given
    kb = publish_chunks(actor=staff_user, texts=[PRODUCT_TEXT], web_search=True)
    # when
    response = anonymous_api.post("/api/chat", {"knowledge_base_id": kb.slug, "question": QUESTION}, format="json")
    # then: the answer quotes the web page and cites it as a web source
    assert response.status_code == 200, response.content
    turn = response.json()
    assert "24 个月" in turn["answer"]
    web = [c for c in turn["citations"] if c["kind"] == "web"]
    assert web, turn["citations"]
    warranty = next(c for c in web if c["url"] == WARRANTY_URL)
    assert warranty["title"] == "星河X3 保修政策说明" and warranty["site"] == "support.example.com"
    assert warranty["cited"] is True
    assert (warranty["chunk_id"], warranty["document_id"], warranty["knowledge_base"]) == (None, None, "")
    assert warranty["context_chunk_ids"] == [] and warranty["assets"] == [] and warranty["preview_url"] is None
    assert all(c["url"] == "" for c in turn["citations"] if c["kind"] != "web")
    # the search was asked the question, once
    assert [call.arguments["query"] for call in mcp_web_search.tool_calls] == [QUESTION]
    # and the page lives only in this turn's evidence: its citations and results
    evidence = ChatEvidence.objects.get(message_id=turn["message_id"])
    assert any(c.get("url") == WARRANTY_URL and c["kind"] == "web" for c in evidence.citations)
    assert any(r["source_kind"] == "web" and r["url"] == WARRANTY_URL for r in evidence.retrieval_results)
    documents = evidence.retrieval_trace["documents"]
    assert documents["candidate_counts"]["web"] == 3 and "web_search_uncached" in documents["notes"]


def test_a_knowledge_base_with_the_switch_off_never_searches_the_web(mcp_web_search, memory_store, staff_user,
                                                                      anonymous_api):
    # given: the deployment has web search, this knowledge base did not switch it on
    kb = publish_chunks(actor=staff_user, texts=[PRODUCT_TEXT], web_search=False)
    # when
    response = anonymous_api.post("/api/chat", {"knowledge_base_id": kb.slug, "question": QUESTION}, format="json")
    # then
    assert response.status_code == 200, response.content
    turn = response.json()
    assert not [c for c in turn["citations"] if c["kind"] == "web"]
    assert mcp_web_search.tool_calls == []
    evidence = ChatEvidence.objects.get(message_id=turn["message_id"])
    assert not any(r["source_kind"] == "web" for r in evidence.retrieval_results)


def test_a_failed_web_search_leaves_the_knowledge_bases_answer(mcp_web_search, memory_store, staff_user,
                                                              anonymous_api):
    # given: the search server is gone
    kb = publish_chunks(actor=staff_user, texts=[PRODUCT_TEXT], web_search=True)
    mcp_web_search.stop()
    # when
    response = anonymous_api.post(
        "/api/chat", {"knowledge_base_id": kb.slug, "question": "星河X3 的覆盖面积是多少？"}, format="json"
    )
    # then: the knowledge base answers, the trace says the web search failed
    assert response.status_code == 200, response.content
    turn = response.json()
    assert "120 平方米" in turn["answer"]
    assert not [c for c in turn["citations"] if c["kind"] == "web"]
    assert "web_search_failed" in turn["retrieval"]["degradations"]


def test_staff_read_a_web_citation_as_such_in_the_trace(mcp_web_search, memory_store, staff_user, anonymous_api,
                                                        client):
    # given: a turn that cited a web page
    kb = publish_chunks(actor=staff_user, texts=[PRODUCT_TEXT], web_search=True)
    turn = anonymous_api.post("/api/chat", {"knowledge_base_id": kb.slug, "question": QUESTION}, format="json").json()
    client.force_login(staff_user)
    # when
    trace = QueryTrace.objects.get(trace_id=turn["trace_id"])
    page = client.get(reverse("admin:chat_querytrace_change", args=[trace.pk])).content.decode()
    # then: labelled as not the knowledge base's, its site named, its address a link opened by a click
    assert "网络来源（非知识库内容）" in page and "support.example.com" in page
    assert (f'<a href="{WARRANTY_URL}" target="_blank" rel="noopener noreferrer nofollow">{WARRANTY_URL}</a>'
            in page)


def page_catalog(client, path: str) -> dict[str, str]:
    page = client.get(path).content.decode()
    return json.loads(re.search(r'<script id="chat-i18n" type="application/json">(.*?)</script>', page, re.S).group(1))


def test_the_chat_page_names_web_sources_in_the_readers_language(client, db):
    # when
    chinese = page_catalog(client, "/")
    english = page_catalog(client, "/?lang=en")
    # then
    assert chinese["web_source"] == "网络来源（非知识库内容）"
    assert english["web_source"] == "Web source (not from the knowledge base)"
