"""Web search as a source of retrieval: web pages join the knowledge base's candidates, are fused
and reranked with them, never cached, and a failed search leaves the knowledge base's results.

The knowledge base side is the in-memory fakes; the web side is the real adapters against the
fake MCP server and the fake SearXNG on 127.0.0.1.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.core.cache import cache
from django.urls import reverse

from engines.websearch import WebSearchConfig
from engines.websearch.http import HttpWebSearch
from engines.websearch.mcp import McpWebSearch
from retrieval.cache import DjangoRetrievalCache
from retrieval.contracts import RetrievalCancelled, RetrievalRequest
from retrieval.federation import FederatedRetrieval
from retrieval.service import RetrievalService
from tests.fakes.mcp_search_server import FakeMcpSearchServer, Slow, Text, ToolFails
from tests.fakes.memory_store import memory_store, publish_chunks  # noqa: F401
from tests.fakes.web_search import FAKE_SEARCH_KEY, mcp_search_server, mcp_web_search, searxng_server  # noqa: F401
from tests.retrieval.pages import visible_text

from .fakes import FakeEmbedder, FakeRepository, FakeReranker, FakeRewriter, FakeStore, chunk

CHUNKS = {
    1: chunk(1, 10, "星河X3 是一款 Wi-Fi 6 路由器，推荐覆盖面积 120 平方米。", ordinal=0),
    2: chunk(2, 10, "星河X5 是一款 Wi-Fi 7 路由器，保修期为 36 个月。", ordinal=1),
    3: chunk(3, 20, "VPN 客户端安装后使用公司邮箱账号登录。", ordinal=0),
    4: chunk(4, 20, "打印机卡纸时先关闭电源，再取出纸张。", ordinal=1),
}
QUESTION = "星河X3 的保修期是多久"
WEB_URLS = {"https://support.example.com/x3/warranty", "https://reviews.example.org/xinghe-x3",
            "https://blog.example.net/routers"}


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


class RecordingCache(DjangoRetrievalCache):
    """The real Django-cache adapter, remembering what was written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[str, Any] = {}

    def set(self, key: str, value: Any, *, ttl: int) -> None:
        self.written[key] = value
        super().set(key, value, ttl=ttl)


class RecordingReranker(FakeReranker):
    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.documents: list[str] = []

    def rerank(self, query, documents, *, top_n):
        self.documents = list(documents)
        return super().rerank(query, documents, top_n=top_n)


def mcp_search(server: FakeMcpSearchServer, *, timeout: float = 3.0) -> McpWebSearch:
    return McpWebSearch(config=WebSearchConfig(url=server.url, api_key=FAKE_SEARCH_KEY, timeout=timeout, count=3))


def make_service(*, web_search=None, reranker=None, cache_=None, epochs=None) -> RetrievalService:
    repository = FakeRepository(chunks=dict(CHUNKS), ready={10, 20})
    return RetrievalService(
        repository=repository, embedder=FakeEmbedder(), store=FakeStore(repository.chunks, embedder=FakeEmbedder()),
        rewriter=FakeRewriter(None), reranker=reranker, cache=cache_ or DjangoRetrievalCache(),
        epochs=epochs or (lambda kb_id: (1, True)), web_search=web_search,
    )


def request(**changes) -> RetrievalRequest:
    return RetrievalRequest(kb_id=1, question=QUESTION, top_k=6, **{"enable_web_search": True, **changes})


def test_web_pages_join_the_candidates_and_are_ranked_among_the_knowledge_bases(mcp_search_server):
    # given
    service = make_service(web_search=mcp_search(mcp_search_server))
    # when
    response = service.retrieve(request())
    # then: both kinds in one ranking, the knowledge base's best first, a web page above a chunk
    kinds = [r.source_kind for r in response.results]
    assert kinds[0] == "kb" and "web" in kinds
    assert "kb" in kinds[kinds.index("web"):]
    web = [r for r in response.results if r.from_web]
    assert {r.url for r in web} <= WEB_URLS and all(r.site for r in web)
    assert all(r.chunk_id < 0 and r.document_id < 0 and r.kb_id == 0 for r in web)
    assert all(r.rank_sources == ("web",) and r.context_chunk_ids == () and r.assets == () for r in web)
    assert all(r.chunk_id > 0 and r.url == "" for r in response.results if not r.from_web)
    warranty = next(r for r in web if r.url == "https://support.example.com/x3/warranty")
    assert warranty.document_title == "星河X3 保修政策说明" and "24 个月" in warranty.content
    assert warranty.relevance > 0
    # and the trace says the web was searched, found what, and how long it took
    trace = response.trace
    assert trace.candidate_counts["web"] == 3
    assert any(t.stage == "channel:web" and t.elapsed_ms > 0 for t in trace.stage_timings)
    assert trace.fusion.startswith("convex") and trace.degradations == ()
    assert mcp_search_server.tool_calls[-1].arguments == {"query": QUESTION, "count": 3}


def test_web_pages_are_reranked_with_the_knowledge_bases_results(mcp_search_server):
    # given
    reranker = RecordingReranker()
    service = make_service(web_search=mcp_search(mcp_search_server), reranker=reranker)
    # when
    response = service.retrieve(request(enable_rerank=True))
    # then: the reranker read the snippets beside the chunks and scored both kinds
    assert any("24 个月" in document for document in reranker.documents)
    assert any(CHUNKS[1].content == document for document in reranker.documents)
    assert {r.source_kind for r in response.results if r.rerank_score is not None} == {"kb", "web"}


def test_parent_expansion_leaves_web_pages_as_they_are(mcp_search_server):
    # when
    response = make_service(web_search=mcp_search(mcp_search_server)).retrieve(request(enable_parent_expansion=True))
    # then
    for result in response.results:
        if result.from_web:
            assert result.content == result.matched_content and result.context_chunk_ids == ()


def test_without_the_flag_no_web_page_is_searched_or_returned(mcp_search_server):
    # given
    service = make_service(web_search=mcp_search(mcp_search_server))
    # when
    response = service.retrieve(request(enable_web_search=False))
    # then
    assert response.results and not any(r.from_web for r in response.results)
    assert mcp_search_server.tool_calls == []
    assert "web" not in response.trace.candidate_counts


def test_a_knowledge_base_without_web_search_notes_it_and_answers_alone():
    # when
    response = make_service(web_search=None).retrieve(request())
    # then
    assert not any(r.from_web for r in response.results)
    assert "web_search_unavailable" in response.trace.notes


def test_the_cache_never_holds_web_pages(mcp_search_server):
    # given
    recording = RecordingCache()
    service = make_service(web_search=mcp_search(mcp_search_server), cache_=recording)
    # when: the same web question twice, then the knowledge base alone, then the web question again
    first = service.retrieve(request())
    second = service.retrieve(request())
    alone = service.retrieve(request(enable_web_search=False))
    again = service.retrieve(request())
    # then: every web question searched the web afresh and read no cached candidates
    assert len(mcp_search_server.tool_calls) == 3
    for response in (first, second, again):
        assert any(r.from_web for r in response.results)
        assert "web_search_uncached" in response.trace.notes
        assert not any(e.stage == "doc_retrieval" for e in response.trace.cache.events)
    # and the only candidates ever cached are the knowledge base's own
    candidates = {key: value for key, value in recording.written.items() if key.startswith("rag:cand:")}
    assert len(candidates) == 1
    stored = next(iter(candidates.values()))
    assert stored["results"] == [r.as_dict() for r in alone.results]
    assert all(item["source_kind"] == "kb" and item["url"] == "" for item in stored["results"])
    assert not any(url in repr(recording.written) for url in WEB_URLS)
    # and a later question without the web is served from that entry, with no web page in it
    cached = service.retrieve(request(enable_web_search=False))
    assert any(e.stage == "doc_retrieval" and e.hit for e in cached.trace.cache.events)
    assert not any(r.from_web for r in cached.results)


@pytest.mark.parametrize(("behaviour", "timeout", "code"), [
    (ToolFails(), 3.0, "web_search_unavailable"),
    (Text("不是 JSON"), 3.0, "web_search_bad_response"),
    (Slow(3.0), 0.5, "web_search_timeout"),
])
def test_a_failed_search_leaves_a_trace_note_and_the_knowledge_bases_results(
    mcp_search_server, behaviour, timeout, code
):
    # given
    mcp_search_server.enqueue(behaviour)
    service = make_service(web_search=mcp_search(mcp_search_server, timeout=timeout))
    started = time.perf_counter()
    # when
    response = service.retrieve(request())
    # then
    assert time.perf_counter() - started < timeout + 1.5
    alone = make_service().retrieve(request(enable_web_search=False))
    assert [r.chunk_id for r in response.results] == [r.chunk_id for r in alone.results]
    assert "web_search_failed" in response.trace.degradations
    errors = [e for e in response.trace.channel_errors if e.channel == "web"]
    assert [e.error for e in errors] == [code]
    assert "sk-leaky-secret" not in repr(response.as_dict())


def test_a_web_search_down_leaves_the_knowledge_bases_results(mcp_search_server):
    # given
    search = mcp_search(mcp_search_server)
    mcp_search_server.stop()
    # when
    response = make_service(web_search=search).retrieve(request())
    # then
    assert response.results and not any(r.from_web for r in response.results)
    assert [e.error for e in response.trace.channel_errors] == ["web_search_unavailable"]


def test_cancelling_stops_waiting_for_a_slow_search(mcp_search_server):
    # given
    mcp_search_server.enqueue(Slow(3.0))
    service = make_service(web_search=mcp_search(mcp_search_server, timeout=5.0))
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.perf_counter()
    # when / then
    with pytest.raises(RetrievalCancelled):
        service.retrieve(request(), cancel=cancel)
    assert time.perf_counter() - started < 1.5


def test_the_http_adapter_feeds_retrieval_the_same_way(searxng_server):
    # given
    search = HttpWebSearch(config=WebSearchConfig(url=searxng_server.url, timeout=3.0, count=3))
    # when
    response = make_service(web_search=search).retrieve(request())
    # then
    web = [r for r in response.results if r.from_web]
    assert {r.url for r in web} == {"https://support.example.com/x3/warranty", "https://reviews.example.org/xinghe-x3"}
    assert searxng_server.requests[-1].params["q"] == [QUESTION]


def test_a_question_over_several_spaces_searches_the_web_once(mcp_search_server):
    # given: two members, as bases of two embedding spaces are searched
    search = mcp_search(mcp_search_server)
    federated = FederatedRetrieval(members=((make_service(web_search=search), (1,)),
                                            (make_service(web_search=search), (2,))))
    # when
    response = federated.retrieve(request())
    # then
    assert len(mcp_search_server.tool_calls) == 1
    assert any(r.from_web for r in response.results)


# --- the admin hit test -------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_hit_test_shows_web_results_labelled_as_such(mcp_web_search, memory_store, staff_user, client):
    # given: a knowledge base with web search on, and staff asking with the web
    kb = publish_chunks(actor=staff_user, texts=["星河X3 是一款 Wi-Fi 6 路由器，推荐覆盖面积 120 平方米。"],
                        web_search=True)
    client.force_login(staff_user)
    form = {"question": QUESTION, "mode": "sparse", "top_k": 5, "candidate_k": 30, "enable_web_search": "on"}
    # when
    page = client.post(reverse("hit-test", args=[kb.pk]), form).content.decode()
    text = visible_text(page)
    # then: web pages among the results, said to be none of the knowledge base's, linked but not fetched
    assert "网络来源（非知识库内容）" in text and "support.example.com" in text
    assert 'href="https://support.example.com/x3/warranty" target="_blank" rel="noopener noreferrer nofollow"' in page
    assert reverse("admin:knowledge_chunk_change", args=[-1]) not in page
    assert 'src="http' not in page  # nothing of the page is loaded, only linked
    assert "命中途径: 网络搜索" in text and "网络搜索 3" in text
    assert "同时检索了网络：结果不读取也不写入缓存" in text
