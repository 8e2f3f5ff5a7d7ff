"""Site-wide error pages: API callers get the JSON error shape, people get the HTML page."""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.translation import gettext as _
from django.views.defaults import server_error as html_server_error

from .api import error_payload, retry_after_headers
from .errors import is_saturation


def busy_response(request: HttpRequest, exc: BaseException | None) -> HttpResponse | None:
    """503 for an error that means "too busy right now" (`ragsite.api.error_payload` decides),
    with Retry-After: the API's JSON error under `/api/`, a page elsewhere; None for any other
    error. Rendered without the request: its context (the user, the session) needs the very
    database that is busy."""
    if exc is None or not is_saturation(exc):
        return None
    status, body = error_payload(exc)
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(body, status=status, json_dumps_params={"ensure_ascii": False})
    else:
        response = HttpResponse(render_to_string("503.html", {"detail": body["detail"]}), status=status)
    for name, value in retry_after_headers(body).items():
        response[name] = value
    return response


def server_error(request: HttpRequest) -> HttpResponse:
    """An exception nothing else handled (e.g. the database refusing connections). Clients of
    `/api/` switch on `code`; an HTML page would break them. Django calls this while it handles
    the exception, so the exception is the one being handled."""
    busy = busy_response(request, sys.exc_info()[1])
    if busy is not None:
        return busy
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"code": "internal_error", "detail": _("服务器内部错误，请稍后重试。")},
            status=500, json_dumps_params={"ensure_ascii": False},
        )
    return html_server_error(request)
