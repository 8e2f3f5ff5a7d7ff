"""The OpenAPI side of the API's error shape (`ragsite.api`): one `Error` component, and the error
responses each operation declares.

Shared ground like `ragsite.errors`: it imports no app, so every app's views may use it.

`AutoSchema` adds the errors any operation can answer, from what the operation is:

- 401 everywhere: a wrong or expired `Authorization: Token …` is refused before the view runs;
- 400 when it takes a body or query parameters (validation, `invalid_request` with `errors`,
  a NUL in the query: ragsite/middleware.py); 413 and 415 when it takes a body (over the size
  limit, a Content-Type it does not read);
- 403 on writes (CSRF of session users, and the caller's role on the knowledge base);
- 404 when its path names an object (and for everything you may not read: it answers 404);
- 429 when the view is throttled;
- 503 everywhere: `server_busy` (the database has no connection left; retry after `Retry-After`).

Views add what only they can answer (409 state conflicts, 422, 502/503 degradations) with
`error_responses(...)` in their `extend_schema(responses=...)`.
"""

from __future__ import annotations

from drf_spectacular.authentication import SessionScheme as SpectacularSessionScheme
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.throttling import ScopedRateThrottle

DESCRIPTIONS = {
    400: "Invalid request: `invalid_request` (with `errors`, per field) or a domain code.",
    401: "`authentication_failed` (wrong or expired token) or `not_authenticated`.",
    403: "`editor_required` / `publisher_required` (the caller's role on the knowledge base), "
         "`create_knowledge_base_denied`, `option_requires_login`, or `csrf_failed`.",
    404: "`not_found`: missing, or not readable by the caller.",
    409: "The object's state does not allow this (`invalid_state`, `conflict`, ...).",
    413: "`request_too_large` (the body is over the size limit) or an upload over its limits.",
    415: "`unsupported_media_type`: the body's Content-Type is not one the operation reads.",
    422: "The object exists but this representation cannot be produced.",
    429: "`throttled`: too many requests; retry after the `Retry-After` header.",
    502: "The model provider failed.",
    503: "`server_busy`: too busy right now, retry after the `Retry-After` header; or a backing "
         "service (database, vector store, model) is unavailable.",
}


class ChannelErrorOutput(serializers.Serializer):
    channel = serializers.CharField(help_text='e.g. "dense:original"')
    error = serializers.CharField(help_text="Stable code, never a provider body.")
    message = serializers.CharField(allow_blank=True)


class ErrorOutput(serializers.Serializer):
    """Every API error (`ragsite.api.exception_handler`, and the chat transports). A domain error
    that adds a field of its own (DomainError's `extra`) declares it here."""

    code = serializers.CharField(help_text="Stable machine code; clients switch on it.")
    detail = serializers.CharField(help_text="Human message (Chinese by default).")
    errors = serializers.JSONField(
        required=False, help_text="`invalid_request` only: DRF's messages per field.",
    )
    channel_errors = ChannelErrorOutput(
        many=True, required=False, help_text="Retrieval errors only: what each channel reported.",
    )
    options = serializers.ListField(
        child=serializers.CharField(), required=False,
        help_text="`option_requires_login` only: the options an anonymous caller may not set.",
    )
    retry_after = serializers.IntegerField(
        required=False, help_text="`throttled` and `server_busy` only: seconds to wait (as `Retry-After`).",
    )
    filter = serializers.IntegerField(
        required=False, help_text="`invalid_filter` only: which metadata filter (1-based) is wrong.",
    )

    class Meta:
        ref_name = "Error"


class SessionScheme(SpectacularSessionScheme):
    """The project's session authentication (its own CSRF code) is the same cookie scheme."""

    target_class = "ragsite.authentication.SessionAuthentication"


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """`extend_schema(responses={200: X, **error_responses(409)})`."""
    return {status: OpenApiResponse(ErrorOutput, description=DESCRIPTIONS[status]) for status in statuses}


SSE_EVENT = {
    "type": "object",
    "properties": {
        "data": {"type": "string", "description": "One UI message stream part as JSON, or `[DONE]` last."},
    },
    "required": ["data"],
}


def describe_chat_stream(result, generator, request, public):
    """Postprocessing hook: `POST /api/chat/stream` is a plain async view (DRF does not stream
    into ASGI), which spectacular never sees. It takes `/api/chat`'s body, as JSON only, and
    answers its errors; its 200 is the AI SDK UI message stream (chat/sse.py)."""
    chat = result["paths"].get("/api/chat", {}).get("post")
    if chat is None:
        return result
    body = chat["requestBody"]["content"]["application/json"]
    result["paths"]["/api/chat/stream"] = {
        "post": {
            "operationId": "chat_stream_create",
            "summary": "The same turn as /api/chat, streamed",
            "description": (
                "AI SDK UI message stream protocol v1 (header `x-vercel-ai-ui-message-stream: v1`): "
                "`start`, `start-step`, `data-status`, `data-retrieval`, `text-start`, `text-delta`..., "
                "`text-end`, `data-answer`, `finish-step`, `finish`, then `data: [DONE]`. Everything up to "
                "`data-retrieval` is decided before the response starts: those failures are JSON errors. "
                "Also takes the AI SDK's own body (`messages`, the chat `id`)."
            ),
            "tags": chat.get("tags", []),
            "security": chat.get("security", []),
            "requestBody": {"content": {"application/json": body}, "required": True},
            "responses": {
                "200": {
                    "description": "Server-sent events, one JSON part per `data:` line.",
                    # Before OpenAPI 3.2 an event stream's schema describes each event.
                    "content": {"text/event-stream": {"schema": SSE_EVENT}},
                },
                **{code: response for code, response in chat["responses"].items() if code != "200"},
            },
        }
    }
    return result


class AutoSchema(SpectacularAutoSchema):
    UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}

    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        parameters = operation.get("parameters", [])
        statuses = {401, 503}
        # Any query parameter can be refused (a page's limit with a NUL in it, too).
        if "requestBody" in operation or any(p["in"] == "query" for p in parameters):
            statuses.add(400)
        if "requestBody" in operation:
            statuses.update((413, 415))
        if self.method in self.UNSAFE:
            statuses.add(403)
        if any(p["in"] == "path" for p in parameters):
            statuses.add(404)
        if self._throttled():
            statuses.add(429)
        responses = operation["responses"]
        for status in sorted(statuses):
            if str(status) not in responses:
                responses[str(status)] = self._get_response_for_code(
                    OpenApiResponse(ErrorOutput, description=DESCRIPTIONS[status]), str(status)
                )
        operation["responses"] = dict(sorted(responses.items()))
        return operation

    def _get_paginator(self):
        # Only list reads are paginated: an upload answers its outcomes as one plain array.
        return super()._get_paginator() if self.method == "GET" else None

    def _throttled(self) -> bool:
        for throttle in self.view.get_throttles():
            if isinstance(throttle, ScopedRateThrottle) and not getattr(self.view, throttle.scope_attr, None):
                continue  # a scoped throttle without a scope on this view never limits it
            return True
        return False
