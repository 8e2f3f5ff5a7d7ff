"""Fixtures for the web search tests: the fake MCP search server and the fake SearXNG, each
started for one test on 127.0.0.1, and settings that point the app at either.

Test modules import the fixtures they use from here (`from tests.fakes.web_search import …`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engines.providers import clear_provider_cache
from tests.fakes.mcp_search_server import FakeMcpSearchServer
from tests.fakes.searxng_server import FakeSearxngServer

# Never a real key: the tests check it reaches the server and nothing else.
FAKE_SEARCH_KEY = "sk-websearch-0123456789-SECRET"


@pytest.fixture
def mcp_search_server() -> Iterator[FakeMcpSearchServer]:
    server = FakeMcpSearchServer().start()
    yield server
    server.stop()


@pytest.fixture
def searxng_server() -> Iterator[FakeSearxngServer]:
    server = FakeSearxngServer().start()
    yield server
    server.stop()


@pytest.fixture
def mcp_web_search(settings, mcp_search_server) -> FakeMcpSearchServer:
    """The deployment's web search is the fake MCP server (Bailian's tool and arguments)."""
    settings.RAG_WEB_SEARCH_BACKEND = "engines.websearch.mcp.McpWebSearch"
    settings.RAG_WEB_SEARCH_URL = mcp_search_server.url
    settings.RAG_WEB_SEARCH_API_KEY = FAKE_SEARCH_KEY
    settings.RAG_WEB_SEARCH_TIMEOUT_SECONDS = 5.0
    settings.RAG_WEB_SEARCH_RESULTS = 3
    clear_provider_cache()
    yield mcp_search_server
    clear_provider_cache()
