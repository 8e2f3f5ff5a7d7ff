"""API-wide error shape: every error is JSON with a stable `code` and a human `detail`."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, TooManyFilesSent
from django.http import Http404
from django.utils.translation import gettext as _
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from ragsite.errors import DomainError, is_saturation, server_busy
from ragsite.throttles import retry_after, throttled_body
from retrieval.contracts import RetrievalError


def error_payload(exc: BaseException) -> tuple[int, dict] | None:
    """(status, body) of a domain or retrieval error, the same for DRF views and for the
    transports that are not DRF views (the SSE stream, the WebSocket consumer, the error
    middleware); None otherwise. Being too busy comes first, whichever error carries it (a
    database error as it is, or wrapped by a layer that could not read its facts): 503
    `server_busy` with `retry_after`."""
    if is_saturation(exc):
        exc = server_busy()
    if isinstance(exc, RetrievalError):
        return exc.http_status, {
            "code": exc.code,
            "detail": exc.message,
            "channel_errors": [
                {"channel": e.channel, "error": e.error, "message": e.message} for e in exc.details
            ],
        }
    if isinstance(exc, DomainError):
        return exc.http_status, {"code": exc.code, "detail": str(exc.message), **exc.extra}
    return None


def retry_after_headers(body: dict) -> dict[str, str]:
    """`Retry-After` for an error body that says when to retry (`throttled`, `server_busy`)."""
    seconds = body.get("retry_after")
    return {"Retry-After": str(seconds)} if seconds is not None else {}


def exception_handler(exc, context):
    known = error_payload(exc)
    if known is not None:
        status_code, body = known
        return Response(body, status=status_code, headers=retry_after_headers(body))
    if isinstance(exc, RequestDataTooBig):
        return Response({"code": "request_too_large", "detail": _("请求体过大。")}, status=413)
    if isinstance(exc, TooManyFilesSent):  # the multipart parser stopped at the first file too many
        detail = _("一次最多上传 %(n)d 个文件。") % {"n": settings.DATA_UPLOAD_MAX_NUMBER_FILES}
        return Response({"code": "too_many_files", "detail": detail}, status=400)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        return None

    if isinstance(exc, exceptions.Throttled):
        response.data = throttled_body(exc.wait)
        response["Retry-After"] = str(retry_after(exc.wait))
    elif isinstance(exc, exceptions.ValidationError):
        response.data = {
            "code": "invalid_request",
            "detail": _first_message(exc.detail),
            "errors": exc.detail,
        }
    elif isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        response.data = {"code": code, "detail": str(exc.detail)}
    if response.status_code == status.HTTP_401_UNAUTHORIZED:
        response.data["code"] = "not_authenticated"
    return response


def _first_message(detail) -> str:
    """The first human message in a (possibly nested) DRF error structure."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            message = _first_message(value)
            if message:
                return message if key == "non_field_errors" else f"{key}: {message}"
        return ""
    if isinstance(detail, list):
        for item in detail:
            message = _first_message(item)
            if message:
                return message
        return ""
    return str(detail)
