"""The MCP tests' client: the official SDK's (`streamable_http_client` + `ClientSession`) over
HTTP, initialised, as an MCP application would use it.

- `mcp_call(url, steps, headers=…)`: runs `steps(session)` on a fresh session, returns its result.
- `tool_call(base_url, name, arguments, headers=…)`: one tool call, its CallToolResult.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

T = TypeVar("T")


def mcp_url(base_url: str) -> str:
    return f"{base_url}/mcp/"


def mcp_call(url: str, steps: Callable[[ClientSession], Awaitable[T]], *, headers: dict[str, str] | None = None,
             responses: list[Any] | None = None) -> T:
    """`steps` on an initialised session of the official client; every HTTP response the
    client received is appended to `responses` (status codes included)."""

    async def record(response) -> None:
        if responses is not None:
            responses.append(response)

    async def run() -> T:
        async with (
            httpx2.AsyncClient(headers=headers or {}, timeout=httpx2.Timeout(60), event_hooks={"response": [record]})
            as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await steps(session)

    return anyio.run(run)


def tool_call(base_url: str, name: str, arguments: dict[str, Any], *, headers: dict[str, str] | None = None):
    """One tool call on a session of its own; the CallToolResult."""
    return mcp_call(mcp_url(base_url), lambda session: session.call_tool(name, arguments), headers=headers)
