"""The MCP endpoint (`/mcp/`, streamable HTTP) and the dispatcher that puts it in front of
Django's HTTP application.

Stateless, JSON responses: every POST carries one JSON-RPC message and gets its answer as one
JSON body, with no `Mcp-Session-Id`. Nothing lives between requests, so any web process behind
the load balancer answers any request, and a call holds nothing once it is answered.

The SDK's session manager serves requests only inside its `run()` (a task group, and the
server's lifespan), which an ASGI server enters on the `lifespan` startup event. Daphne sends
no lifespan events (daphne 4 has no lifespan protocol at all), so a manager started that way
never starts. Each request therefore gets a manager of its own, entered around that request:
in stateless mode a manager holds nothing but the request's own transport and task, so one per
request costs a few objects, ties the protocol's task to the request's (a client that leaves
cancels it), and needs no process-wide state started on a first request.

Before the protocol runs, the endpoint checks the Host header as Django would (the request
does not pass Django's own check) and authenticates the caller with the API's tokens
(`integrations.mcp.auth`) in a worker thread: a bad token is a plain HTTP 401 that any client
shows as such, as the API answers it.
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.translation import get_language_from_request, gettext_noop
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import DEFAULT_MAX_REQUEST_BODY_SIZE, StreamableHTTPSessionManager
from starlette.responses import JSONResponse

from ragsite.api import error_payload
from ragsite.db import releasing
from ragsite.errors import ServerBusy
from ragsite.executors import CHAT_TURN, pool, run_admitted
from ragsite.throttles import caller_from_scope

from .auth import SCOPE_KEY, McpCaller, Unauthenticated, caller_user
from .server import bilingual, build_server

PATH = "/mcp/"

AUTHENTICATION_FAILED = gettext_noop("令牌无效或已过期。")  # the API's words (chat.views)
BAD_HOST = gettext_noop("请求的主机名不被允许。")
POST_ONLY = gettext_noop("MCP 端点只接受 POST：无状态 JSON 模式不提供事件流。")


class McpEndpoint:
    def __init__(self, server: MCPServer) -> None:
        # The protocol server under MCPServer's tools, which a session manager serves. MCPServer
        # reaches it only through the one manager its `streamable_http_app()` builds (a
        # Starlette app whose lifespan daphne never runs); a manager per request needs it here.
        self._protocol = server._lowlevel_server

    async def __call__(self, scope, receive, send) -> None:
        request = caller_from_scope(scope)
        host = request.headers.get("Host", "")
        if not _host_allowed(host):
            await JSONResponse({"code": "bad_host", "detail": bilingual(BAD_HOST)}, status_code=400)(scope, receive, send)
            return
        if scope["method"] != "POST":
            # Stateless JSON mode offers no server-to-client stream (GET) and no session to end
            # (DELETE); the SDK would hold a GET open forever, pinging every 15 seconds.
            response = JSONResponse({"code": "method_not_allowed", "detail": bilingual(POST_ONLY)},
                                    status_code=405, headers={"Allow": "POST"})
            await response(scope, receive, send)
            return
        try:
            user = await run_admitted(
                pool(CHAT_TURN), releasing(partial(caller_user, request.headers.get("Authorization", ""))),
                wait=settings.RAG_CHAT_QUEUE_TIMEOUT_SECONDS,
            )
        except Unauthenticated:
            response = JSONResponse(
                {"code": "authentication_failed", "detail": bilingual(AUTHENTICATION_FAILED)}, status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="ragsite", error="invalid_token"'},
            )
            await response(scope, receive, send)
            return
        except ServerBusy as exc:
            _status, body = error_payload(exc)
            await JSONResponse(body, status_code=503, headers={"Retry-After": str(body["retry_after"])})(
                scope, receive, send
            )
            return
        request.user = user
        caller = McpCaller(
            user=user, request=request, language=_language(request), base_url=f"{_scheme(scope, request)}://{host}",
        )
        manager = StreamableHTTPSessionManager(
            app=self._protocol, json_response=True, stateless=True,
            # Bodies held to what Django holds the API's JSON bodies to.
            max_request_body_size=settings.DATA_UPLOAD_MAX_MEMORY_SIZE or DEFAULT_MAX_REQUEST_BODY_SIZE,
        )
        async with manager.run():
            await manager.handle_request({**scope, SCOPE_KEY: caller}, receive, send)


def with_mcp(http_app):
    """`http_app` with the MCP endpoint at `/mcp/` (and `/mcp`, as clients are configured
    either way) in front of it."""
    endpoint = McpEndpoint(build_server())

    async def dispatch(scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] in (PATH, PATH.rstrip("/")):
            await endpoint(scope, receive, send)
        else:
            await http_app(scope, receive, send)

    return dispatch


def _host_allowed(host: str) -> bool:
    domain, _port = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:  # Django's own fallback
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return bool(domain) and validate_host(domain, allowed)


def _scheme(scope, request) -> str:
    """https behind a proxy that says so, as Django's `SECURE_PROXY_SSL_HEADER` reads it."""
    proxy_header = settings.SECURE_PROXY_SSL_HEADER
    if proxy_header:
        name, secure = proxy_header
        value = request.META.get(name, "")
        if value:
            return "https" if value.split(",")[0].strip() == secure else "http"
    return scope.get("scheme") or "http"


def _language(request) -> str:
    return get_language_from_request(SimpleNamespace(COOKIES={}, META=request.META), check_path=False)
