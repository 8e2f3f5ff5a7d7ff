"""Web search through an MCP server's search tool, with the official `mcp` SDK over streamable
HTTP (Bailian's WebSearch MCP, `https://dashscope.aliyuncs.com/api/v1/mcps/WebSearch/mcp`, is
the reference; any MCP server with a search tool taking a query works).

Each search is one short session: connect, initialize, call the tool, close. The port is
synchronous (retrieval runs it on its thread pool), so the SDK's async client runs on an event
loop of the calling thread for the length of the call, under one deadline for all of it.

The tool's answer is read from its structured content or from text content holding JSON: a
list of pages, or an object with the list under `pages`, `results`, … (`engines.websearch`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import StreamableHTTPError, streamable_http_client
from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

from engines.ports import (
    WebResult,
    WebSearchBadResponse,
    WebSearchError,
    WebSearchTimeout,
    WebSearchUnavailable,
)

from . import WebSearchConfig, result_entries, web_results

logger = logging.getLogger("engines.websearch")

DEFAULT_TOOL = "bailian_web_search"
DEFAULT_QUERY_ARGUMENT = "query"
DEFAULT_COUNT_ARGUMENT = "count"

# What the SDK and its transport raise for a server that is down, refuses us or breaks the
# protocol; anything else is a bug and propagates.
_UNAVAILABLE = (httpx2.TransportError, httpx2.HTTPStatusError, MCPError, StreamableHTTPError)


class McpWebSearch:
    def __init__(self, *, config: WebSearchConfig) -> None:
        self.config = config
        self.tool = config.tool or DEFAULT_TOOL
        self.name = f"mcp:{self.tool}"
        self.timeout = config.timeout
        self._arguments_of = (
            config.query_argument or DEFAULT_QUERY_ARGUMENT, config.count_argument or DEFAULT_COUNT_ARGUMENT
        )

    def search(self, query: str) -> list[WebResult]:
        try:
            result = anyio.run(self._call, query)
        except (TimeoutError, *_UNAVAILABLE, ValidationError, BaseExceptionGroup) as exc:
            error = _port_error(exc)
            if error is exc:
                raise
            raise error from None
        return self._results(result)

    async def _call(self, query: str) -> CallToolResult:
        query_key, count_key = self._arguments_of
        with anyio.fail_after(self.timeout):
            async with (
                httpx2.AsyncClient(headers=self.config.headers, timeout=httpx2.Timeout(self.timeout)) as client,
                streamable_http_client(self.config.url, http_client=client) as (read, write),
                ClientSession(read, write, read_timeout_seconds=self.timeout) as session,
            ):
                await session.initialize()
                try:
                    return await session.call_tool(
                        self.tool, {query_key: query, count_key: self.config.count},
                        read_timeout_seconds=self.timeout,
                    )
                except RuntimeError:
                    # The SDK's word for a tool answer that breaks the tool's own contract
                    # (structured content against its output schema, a request for input).
                    raise WebSearchBadResponse(f"web search tool {self.tool} broke its contract") from None

    def _results(self, result: CallToolResult) -> list[WebResult]:
        if result.is_error:
            # The tool's own words may quote the request or the key: only that it failed is kept.
            raise WebSearchUnavailable(f"web search tool {self.tool} reported an error")
        for payload in _payloads(result):
            entries = result_entries(payload)
            if entries is not None:
                return web_results(entries, count=self.config.count)
        raise WebSearchBadResponse(f"web search tool {self.tool} answered without a list of results")


def _payloads(result: CallToolResult) -> list[Any]:
    """Structured content first, then each text block that holds JSON."""
    payloads: list[Any] = []
    if result.structured_content is not None:
        payloads.append(result.structured_content)
    for block in result.content:
        if isinstance(block, TextContent):
            try:
                payloads.append(json.loads(block.text))
            except json.JSONDecodeError:
                continue
    return payloads


def _port_error(exc: BaseException) -> BaseException:
    """The port error for what the call raised; `exc` itself when it is not a failure of the
    search (a cancellation, a bug). The SDK runs the transport in task groups, so one failure
    may arrive wrapped in (nested) exception groups: its leaves decide."""
    leaves = list(_leaves(exc))
    if any(isinstance(leaf, (TimeoutError, httpx2.TimeoutException)) for leaf in leaves):
        logger.warning("web search timed out")
        return WebSearchTimeout("web search timed out")
    if leaves and all(isinstance(leaf, (*_UNAVAILABLE, WebSearchError, ValidationError)) for leaf in leaves):
        ours = next((leaf for leaf in leaves if isinstance(leaf, WebSearchError)), None)
        if ours is not None:
            return ours
        if any(isinstance(leaf, ValidationError) for leaf in leaves):
            # A reply that is not a valid MCP message: the server answered, but not in MCP.
            logger.warning("web search: the MCP server's reply broke the protocol")
            return WebSearchBadResponse("web search: the MCP server's reply broke the protocol")
        kinds = sorted({type(leaf).__name__ for leaf in leaves})
        logger.warning("web search: MCP server unavailable (%s)", ", ".join(kinds))
        return WebSearchUnavailable(f"web search: MCP server unavailable ({', '.join(kinds)})")
    return exc


def _leaves(exc: BaseException):
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc
