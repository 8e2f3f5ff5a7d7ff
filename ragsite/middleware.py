"""Site-wide guards: a NUL character in the URL is refused before any view sees it, a view
that found the server too busy answers 503, and a streaming response gives its request's
database connection back before its body streams.

PostgreSQL text cannot hold a NUL: `/api/knowledge-bases/a%00b/` or `?knowledge_base_id=a%00b`
reached a query and failed there (a 500 on PostgreSQL, a plain miss on SQLite). Bodies are the
serializers' (DRF's CharField refuses NUL); the path and the query string are checked here, for
every view (API, pages, the SSE stream).
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import JsonResponse
from django.utils.deprecation import MiddlewareMixin
from django.utils.translation import gettext as _
from rest_framework import exceptions

from .db import release_connection
from .views import busy_response


class ReleaseConnectionMiddleware(MiddlewareMixin):
    """Outermost: once the other middleware is done with a streaming response (the session
    saved, say), the connection the request took goes back to the pool. Django would close it
    only when the response ends, which for an answer streaming from a model is seconds later,
    and the turn's own stages would wait for the pool meanwhile. The body needs none of it: it
    reads and writes through the turn's own workers."""

    def process_response(self, request, response):
        if response.streaming:
            release_connection()
        return response


def nul_refusal(request) -> JsonResponse | None:
    """404 for a path with NUL (nothing is named so), 400 for a query parameter with one."""
    if "\x00" in request.path:
        return _json({"code": "not_found", "detail": str(exceptions.NotFound.default_detail)}, 404)
    if any("\x00" in key or any("\x00" in value for value in values) for key, values in request.GET.lists()):
        return _json({"code": "invalid_request", "detail": _("请求参数不能包含空字符（NUL）。")}, 400)
    return None


def _json(payload: dict, status: int) -> JsonResponse:
    return JsonResponse(payload, status=status, json_dumps_params={"ensure_ascii": False})


class RejectNulMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        return nul_refusal(request) or self.get_response(request)

    async def __acall__(self, request):
        return nul_refusal(request) or await self.get_response(request)


class ServerBusyMiddleware(MiddlewareMixin):
    """A view that found the server too busy (the database out of connections) answers 503 with
    Retry-After, not 500 (nor, under DEBUG, the debug page): DRF views map it in their
    exception handler, this catches it for the others (the SSE stream before it starts, the chat
    page, the admin). Errors raised outside views reach `handler500`, which maps them the same."""

    def process_exception(self, request, exception):
        return busy_response(request, exception)
