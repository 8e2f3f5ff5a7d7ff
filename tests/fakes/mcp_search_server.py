"""A fake web-search MCP server on 127.0.0.1: the official SDK's `MCPServer` over streamable
HTTP (uvicorn in a thread), so the MCP adapter is tested against what really goes over the wire.

It offers two search tools:

=====================  ========================================================================
bailian_web_search     `query`, `count`: the shape of Bailian's WebSearch MCP (text content
                       holding JSON `{"pages": [...]}`)
search                 `q`, `max_results`: another server's argument names
=====================  ========================================================================

By default a tool answers with `count` of `PAGES`; a test queues behaviours with `enqueue(...)`
(each used once, in order). Every HTTP request's Authorization header and every tool call's
arguments are recorded.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

from tests.fakes.ports import loopback_socket

PAGES: tuple[dict[str, Any], ...] = (
    {"title": "星河X3 保修政策说明", "url": "https://support.example.com/x3/warranty", "hostname": "support.example.com",
     "snippet": "星河X3 的整机保修期为 24 个月，保修期内免费维修。"},
    {"title": "星河X3 评测", "url": "https://reviews.example.org/xinghe-x3", "hostname": "reviews.example.org",
     "snippet": "星河X3 是一款 Wi-Fi 6 路由器，覆盖面积约 120 平方米。"},
    {"title": "路由器选购指南", "url": "https://blog.example.net/routers", "hostname": "blog.example.net",
     "snippet": "选购路由器时要关注覆盖面积、保修期与售后服务。"},
)


# --- behaviours ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pages:
    """These pages, as text JSON under `key` (None: a bare JSON list) or as structured content."""

    pages: tuple[dict[str, Any], ...] = PAGES
    key: str | None = "pages"
    structured: bool = False


@dataclass(frozen=True)
class Text:
    """Exactly this text content (e.g. not JSON at all)."""

    text: str


@dataclass(frozen=True)
class ToolFails:
    """The tool reports an error (`isError`), as a search backend that failed would."""

    message: str = "search backend failed: quota exceeded for key sk-leaky-secret"


@dataclass(frozen=True)
class Slow:
    """Wait, then behave as `then` (default pages)."""

    seconds: float
    then: Any = None


@dataclass
class ToolCall:
    tool: str
    arguments: dict[str, Any]


@dataclass
class FakeMcpSearchServer:
    tool_calls: list[ToolCall] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)
    _queue: deque = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None
    _port: int = 0

    # -- lifecycle --

    def start(self) -> FakeMcpSearchServer:
        sock = loopback_socket()
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(
            _RecordingHeaders(self._app(), self), log_level="warning", lifespan="on",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="fake-mcp-search", daemon=True
        )
        self._thread.start()
        for _ in range(500):
            if self._server.started:
                break
            threading.Event().wait(0.01)
        assert self._server.started, "the fake MCP server did not start"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}/mcp"

    def enqueue(self, *behaviours: Any) -> None:
        with self._lock:
            self._queue.extend(behaviours)

    # -- the server --

    def _app(self):
        server = MCPServer(name="fake-web-search", log_level="WARNING")
        fake = self

        @server.tool(description="Search the web.")
        async def bailian_web_search(query: str, count: int = 5) -> CallToolResult:
            return await fake._answer("bailian_web_search", {"query": query, "count": count}, count)

        @server.tool(description="Search the web (other argument names).")
        async def search(q: str, max_results: int = 5) -> CallToolResult:
            return await fake._answer("search", {"q": q, "max_results": max_results}, max_results)

        return server.streamable_http_app()

    async def _answer(self, tool: str, arguments: dict[str, Any], count: int) -> CallToolResult:
        with self._lock:
            self.tool_calls.append(ToolCall(tool, arguments))
            behaviour = self._queue.popleft() if self._queue else None
        return await _behave(behaviour, count)


async def _behave(behaviour: Any, count: int) -> CallToolResult:
    if isinstance(behaviour, Slow):
        await anyio.sleep(behaviour.seconds)
        return await _behave(behaviour.then, count)
    if isinstance(behaviour, Text):
        return CallToolResult(content=[TextContent(type="text", text=behaviour.text)])
    if isinstance(behaviour, ToolFails):
        return CallToolResult(content=[TextContent(type="text", text=behaviour.message)], is_error=True)
    pages = behaviour if isinstance(behaviour, Pages) else Pages()
    chosen = [dict(page) for page in pages.pages[:count]]
    payload: Any = chosen if pages.key is None else {pages.key: chosen, "request_id": "fake-request"}
    if pages.structured:
        return CallToolResult(content=[], structured_content=payload if isinstance(payload, dict) else {"pages": payload})
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))])


class _RecordingHeaders:
    """ASGI middleware: remembers each HTTP request's Authorization header."""

    def __init__(self, app, fake: FakeMcpSearchServer) -> None:
        self.app = app
        self.fake = fake

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            with self.fake._lock:
                self.fake.authorizations.append(headers.get(b"authorization", b"").decode("latin-1"))
        await self.app(scope, receive, send)
