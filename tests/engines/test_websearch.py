"""The web search adapters against fake servers on 127.0.0.1: the MCP one through the official
SDK to a real MCP server, the HTTP one to a SearXNG-shaped JSON endpoint."""

from __future__ import annotations

import time
import traceback

import pytest
from django.core.exceptions import ImproperlyConfigured

from engines.ports import (
    WebResult,
    WebSearch,
    WebSearchBadResponse,
    WebSearchError,
    WebSearchTimeout,
    WebSearchUnavailable,
)
from engines.providers import get_web_search, web_search_configured
from engines.websearch import MAX_SNIPPET_CHARS, WebSearchConfig
from engines.websearch.http import HttpWebSearch
from engines.websearch.mcp import McpWebSearch
from tests.fakes.mcp_search_server import FakeMcpSearchServer, Pages, Slow, Text, ToolFails
from tests.fakes.searxng_server import FakeSearxngServer, NotJson, Results, Status
from tests.fakes.searxng_server import Slow as SlowHttp
from tests.fakes.web_search import FAKE_SEARCH_KEY, mcp_search_server, searxng_server  # noqa: F401


def mcp(server: FakeMcpSearchServer, **changes) -> McpWebSearch:
    return McpWebSearch(config=WebSearchConfig(**{"url": server.url, "api_key": FAKE_SEARCH_KEY, "timeout": 3.0,
                                                  "count": 3, **changes}))


def http(server: FakeSearxngServer, **changes) -> HttpWebSearch:
    return HttpWebSearch(config=WebSearchConfig(**{"url": server.url, "api_key": FAKE_SEARCH_KEY, "timeout": 3.0,
                                                   "count": 3, **changes}))


def assert_secret_free(exc: BaseException) -> None:
    text = "".join(traceback.format_exception(exc))
    assert FAKE_SEARCH_KEY not in text and "sk-leaky-secret" not in text


# --- MCP ----------------------------------------------------------------------------------------


def test_the_mcp_adapter_calls_the_search_tool_and_reads_its_pages(mcp_search_server):
    # given
    search = mcp(mcp_search_server)
    # when
    results = search.search("星河X3 保修多久")
    # then: Bailian's tool with its arguments, the key as a Bearer token, the pages in order
    assert isinstance(search, WebSearch)
    assert mcp_search_server.tool_calls[-1].tool == "bailian_web_search"
    assert mcp_search_server.tool_calls[-1].arguments == {"query": "星河X3 保修多久", "count": 3}
    assert set(mcp_search_server.authorizations) == {f"Bearer {FAKE_SEARCH_KEY}"}
    assert results[0] == WebResult(
        title="星河X3 保修政策说明", url="https://support.example.com/x3/warranty", site="support.example.com",
        snippet="星河X3 的整机保修期为 24 个月，保修期内免费维修。", rank=1,
    )
    assert [r.rank for r in results] == [1, 2, 3]


def test_the_mcp_adapter_names_the_tool_and_arguments_it_is_configured_with(mcp_search_server):
    # given
    search = mcp(mcp_search_server, tool="search", query_argument="q", count_argument="max_results", count=2)
    # when
    results = search.search("路由器")
    # then
    assert mcp_search_server.tool_calls[-1].tool == "search"
    assert mcp_search_server.tool_calls[-1].arguments == {"q": "路由器", "max_results": 2}
    assert len(results) == 2


def test_the_mcp_adapter_reads_structured_content_and_a_bare_list(mcp_search_server):
    # given
    mcp_search_server.enqueue(Pages(structured=True), Pages(key=None))
    search = mcp(mcp_search_server)
    # when
    structured = search.search("星河X3")
    bare = search.search("星河X3")
    # then
    assert [r.url for r in structured] == [r.url for r in bare]
    assert structured[0].site == "support.example.com"


def test_the_common_shapes_are_read_and_unsafe_or_empty_entries_dropped(mcp_search_server):
    # given: other services' field names, addresses a reader must not be sent to, an empty
    # snippet, a duplicate, an overlong snippet
    pages = (
        {"name": "Other names", "link": "https://a.example.com/p", "description": "用 link 与 description。", "site": "A 站"},
        {"title": "Script", "url": "javascript:alert(1)", "snippet": "点我"},
        {"title": "Data", "url": "data:text/html,hi", "snippet": "点我"},
        {"title": "FTP", "url": "ftp://files.example.com/x", "snippet": "文件"},
        {"title": "Looks like a bank", "url": "https://bank.example@evil.example/", "snippet": "登录"},
        {"title": "Bidi", "url": "https://x.example/\u202egnp.exe", "snippet": "下载"},
        {"title": "No text", "url": "https://b.example.com/"},
        {"title": "Dup", "url": "https://a.example.com/p", "content": "同一地址"},
        {"title": "  Long\n  title  ", "url": "https://c.example.com/long", "content": "长" * 5000},
    )
    mcp_search_server.enqueue(Pages(pages=pages))
    # when
    results = mcp(mcp_search_server, count=10).search("任何问题")
    # then
    assert [(r.title, r.url, r.site) for r in results] == [
        ("Other names", "https://a.example.com/p", "A 站"),
        ("Long title", "https://c.example.com/long", "c.example.com"),
    ]
    assert results[0].snippet == "用 link 与 description。"
    assert len(results[1].snippet) == MAX_SNIPPET_CHARS and results[1].snippet.endswith("…")
    assert [r.rank for r in results] == [1, 2]


def test_a_slow_mcp_server_times_out_within_the_budget(mcp_search_server):
    # given
    mcp_search_server.enqueue(Slow(3.0))
    search = mcp(mcp_search_server, timeout=0.5)
    started = time.perf_counter()
    # when
    with pytest.raises(WebSearchTimeout) as raised:
        search.search("星河X3")
    # then
    assert time.perf_counter() - started < 2.0
    assert raised.value.code == "web_search_timeout"
    assert_secret_free(raised.value)


@pytest.mark.parametrize("behaviour", [Text("这不是 JSON"), Text('{"answer": "没有结果列表"}')])
def test_an_mcp_answer_without_results_is_a_bad_response(mcp_search_server, behaviour):
    # given
    mcp_search_server.enqueue(behaviour)
    # when
    with pytest.raises(WebSearchBadResponse) as raised:
        mcp(mcp_search_server).search("星河X3")
    # then
    assert raised.value.code == "web_search_bad_response"


def test_a_failing_search_tool_is_unavailable_and_its_words_are_not_repeated(mcp_search_server):
    # given: the tool's error text quotes a key
    mcp_search_server.enqueue(ToolFails())
    # when
    with pytest.raises(WebSearchUnavailable) as raised:
        mcp(mcp_search_server).search("星河X3")
    # then
    assert raised.value.code == "web_search_unavailable"
    assert_secret_free(raised.value)


def test_an_mcp_server_that_is_down_or_elsewhere_is_unavailable(mcp_search_server):
    # given: a path with no MCP endpoint, then a port nobody listens on
    wrong_path = mcp_search_server.url.replace("/mcp", "/nothing-here")
    down = mcp_search_server.url
    with pytest.raises(WebSearchUnavailable) as elsewhere:
        McpWebSearch(config=WebSearchConfig(url=wrong_path, api_key=FAKE_SEARCH_KEY, timeout=3.0)).search("星河X3")
    mcp_search_server.stop()
    # when
    with pytest.raises(WebSearchUnavailable) as gone:
        McpWebSearch(config=WebSearchConfig(url=down, api_key=FAKE_SEARCH_KEY, timeout=3.0)).search("星河X3")
    # then
    for raised in (elsewhere, gone):
        assert isinstance(raised.value, WebSearchError) and raised.value.code == "web_search_unavailable"
        assert_secret_free(raised.value)


# --- HTTP (SearXNG) -----------------------------------------------------------------------------


def test_the_http_adapter_asks_for_json_and_reads_the_results(searxng_server):
    # given
    search = http(searxng_server)
    # when
    results = search.search("星河X3 保修多久")
    # then
    request = searxng_server.requests[-1]
    assert request.path == "/search"
    assert request.params == {"q": ["星河X3 保修多久"], "format": ["json"]}
    assert request.authorization == f"Bearer {FAKE_SEARCH_KEY}"
    assert [(r.title, r.site, r.rank) for r in results] == [
        ("星河X3 保修政策说明", "support.example.com", 1), ("星河X3 评测", "reviews.example.org", 2),
    ]
    assert results[0].snippet == "星河X3 的整机保修期为 24 个月，保修期内免费维修。"


def test_the_http_adapter_sends_named_arguments_and_keeps_the_count(searxng_server):
    # given: five results where two are asked for, a count parameter named
    searxng_server.enqueue(Results(results=tuple(
        {"title": f"页 {n}", "url": f"https://p{n}.example.com/", "content": f"内容 {n}"} for n in range(5)
    )))
    search = http(searxng_server, query_argument="query", count_argument="limit", count=2, api_key="")
    # when
    results = search.search("问题")
    # then
    request = searxng_server.requests[-1]
    assert request.params == {"query": ["问题"], "format": ["json"], "limit": ["2"]}
    assert request.authorization == ""
    assert [r.url for r in results] == ["https://p0.example.com/", "https://p1.example.com/"]


def test_a_slow_http_endpoint_times_out(searxng_server):
    # given
    searxng_server.enqueue(SlowHttp(3.0))
    started = time.perf_counter()
    # when
    with pytest.raises(WebSearchTimeout):
        http(searxng_server, timeout=0.5).search("星河X3")
    # then
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize("behaviour", [NotJson(), Status(200, '{"answers": []}')])
def test_an_http_answer_without_results_is_a_bad_response(searxng_server, behaviour):
    # given
    searxng_server.enqueue(behaviour)
    # when / then
    with pytest.raises(WebSearchBadResponse):
        http(searxng_server).search("星河X3")


@pytest.mark.parametrize("status", [401, 429, 503])
def test_an_http_error_status_is_unavailable_without_the_body(searxng_server, status):
    # given
    searxng_server.enqueue(Status(status))
    # when
    with pytest.raises(WebSearchUnavailable) as raised:
        http(searxng_server).search("星河X3")
    # then
    assert str(status) in str(raised.value)
    assert_secret_free(raised.value)


def test_an_http_endpoint_that_is_down_is_unavailable(searxng_server):
    # given
    search = http(searxng_server)
    searxng_server.stop()
    # when / then
    with pytest.raises(WebSearchUnavailable) as raised:
        search.search("星河X3")
    assert_secret_free(raised.value)


# --- the one place that chooses the backend -----------------------------------------------------


def test_web_search_is_off_unless_a_backend_is_named(settings):
    # given
    settings.RAG_WEB_SEARCH_BACKEND = ""
    # when / then
    assert get_web_search() is None and not web_search_configured()


def test_the_backend_is_chosen_by_dotted_path_with_its_settings(settings):
    # given
    settings.RAG_WEB_SEARCH_BACKEND = "engines.websearch.mcp.McpWebSearch"
    settings.RAG_WEB_SEARCH_URL = "https://dashscope.aliyuncs.com/api/v1/mcps/WebSearch/mcp"
    settings.RAG_WEB_SEARCH_API_KEY = FAKE_SEARCH_KEY
    settings.RAG_WEB_SEARCH_RESULTS = 7
    settings.RAG_WEB_SEARCH_TIMEOUT_SECONDS = 4.0
    # when
    search = get_web_search()
    # then
    assert isinstance(search, McpWebSearch) and web_search_configured()
    assert search.config.count == 7 and search.timeout == 4.0 and search.tool == "bailian_web_search"
    assert get_web_search() is search  # one adapter per configuration
    assert FAKE_SEARCH_KEY not in repr(search.config)


@pytest.mark.parametrize("changes", [
    {"RAG_WEB_SEARCH_URL": ""}, {"RAG_WEB_SEARCH_URL": "file:///etc/passwd"}, {"RAG_WEB_SEARCH_RESULTS": 500},
])
def test_a_named_backend_without_a_usable_endpoint_is_misconfigured(settings, changes):
    # given
    settings.RAG_WEB_SEARCH_BACKEND = "engines.websearch.http.HttpWebSearch"
    settings.RAG_WEB_SEARCH_URL = "http://127.0.0.1:8888/search"
    for name, value in changes.items():
        setattr(settings, name, value)
    # when / then
    with pytest.raises(ImproperlyConfigured):
        get_web_search()
