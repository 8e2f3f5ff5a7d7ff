"""Site-wide error pages: API callers get the JSON error shape, people get the HTML page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext as _
from django.views.defaults import server_error as html_server_error


def server_error(request: HttpRequest) -> HttpResponse:
    """An exception nothing else handled (e.g. the database refusing connections). Clients of
    `/api/` switch on `code`; an HTML page would break them."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"code": "internal_error", "detail": _("服务器内部错误，请稍后重试。")},
            status=500, json_dumps_params={"ensure_ascii": False},
        )
    return html_server_error(request)
