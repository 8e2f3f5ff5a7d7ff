"""OpenAI's error shape, `{"error": {"message", "type", "code", "param"}}`, from ragsite's
(`{"code", "detail", …}`, `ragsite.api`). The OpenAI SDKs pick their exception class from the
HTTP status (401 AuthenticationError, 404 NotFoundError, 429 RateLimitError, 5xx
InternalServerError) and show `message`; `code` keeps ragsite's stable code, so a client can
still switch on it, except where OpenAI has a code of its own for the same thing."""

from __future__ import annotations

from django.http import JsonResponse
from django.utils.translation import gettext as _

from ragsite.api import error_payload, retry_after_headers

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}
# ragsite codes OpenAI names otherwise: a model (knowledge base) that is missing or hidden.
CODES = {"knowledge_base_not_found": "model_not_found", "not_authenticated": "invalid_api_key",
         "authentication_failed": "invalid_api_key"}
# ragsite request fields a chat-completions caller knows by another name.
PARAMS = {"knowledge_base_id": "model", "question": "messages", "messages": "messages"}
# The parameter a ragsite error code is about, when its body does not say.
CODE_PARAMS = {
    "knowledge_base_not_found": "model", "question_empty": "messages", "question_too_long": "messages",
    "invalid_filter": "ragsite.filters", "too_many_knowledge_bases": "ragsite.knowledge_base_ids",
    "conversation_not_found": "ragsite.conversation_id", "conversation_kb_mismatch": "ragsite.conversation_id",
    "option_requires_login": "ragsite",
}


def error_type(status: int) -> str:
    return TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(*, status: int, code: str, message: str, param: str | None = None, **extra) -> dict:
    """The body; `extra` (e.g. `retry_after`) goes beside the standard fields of `error`."""
    return {"error": {"message": message, "type": error_type(status), "code": CODES.get(code, code),
                      "param": param, **extra}}


def from_ragsite(status: int, body: dict) -> dict:
    """A ragsite error body (`code`, `detail`, its own fields) in OpenAI's shape."""
    extra = {key: value for key, value in body.items() if key in ("retry_after",)}
    param = body.get("param") or CODE_PARAMS.get(body.get("code"))
    if param is None and isinstance(body.get("errors"), dict) and body["errors"]:
        field = next(iter(body["errors"]))
        param = PARAMS.get(field, f"ragsite.{field}")
    return error_body(status=status, code=str(body.get("code") or "error"), message=str(body.get("detail", "")),
                      param=param, **extra)


def response(body: dict, status: int) -> JsonResponse:
    """A JSON error response; `Retry-After` when the error says when to retry."""
    reply = JsonResponse(body, status=status, json_dumps_params={"ensure_ascii": False})
    for name, value in retry_after_headers(body["error"]).items():
        reply[name] = value
    return reply


def ragsite_error_response(status: int, body: dict) -> JsonResponse:
    return response(from_ragsite(status, body), status)


def exception_response(exc: BaseException) -> JsonResponse | None:
    """The response for a domain or retrieval error the API knows; None for any other."""
    known = error_payload(exc)
    return ragsite_error_response(*known) if known is not None else None


def internal_error(message: str | None = None) -> JsonResponse:
    return response(error_body(status=500, code="internal_error", message=message or _("服务器内部错误。")), 500)
