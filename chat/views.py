"""Chat transports over one `RAGService`: SSE (AI SDK UI message stream), JSON, history.

The SSE view runs preparation (validation, access, routing, retrieval, citations) before the
response starts, so every failure up to then is an ordinary JSON error with a code; the stream
itself carries only the answer and, if something breaks later, an `error` part with a stable
message. A client that disconnects cancels the turn.
"""

from __future__ import annotations

import asyncio
import json
import logging

from asgiref.sync import sync_to_async
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.authtoken.models import Token
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ragsite.errors import DomainError
from retrieval.contracts import RetrievalError

from . import selectors, sse
from .access import access_conversation
from .contracts import GenerationFailed, Requester, TurnCancelled
from .pipeline.events import Delta, Evidence, Finished, Started, Status
from .pipeline.rag import GENERATION_FAILED, RAGService
from .serializers import ChatRequestInput
from .streaming import TurnRunner

logger = logging.getLogger(__name__)


# --- who is asking ------------------------------------------------------------------------------


def _anonymous_session_key(request: HttpRequest) -> str:
    """Anonymous readers of a public knowledge base own their conversations by session."""
    session = request.session
    if not session.session_key:
        session["chat"] = True  # modified: the middleware sends the cookie with this response
        session.save()
    return session.session_key or ""


def requester_for(request) -> Requester:
    user = request.user
    if user is not None and user.is_authenticated:
        return Requester(user=user)
    return Requester(user=AnonymousUser(), session_key=_anonymous_session_key(request))


class _CsrfCheck(CsrfViewMiddleware):
    def _reject(self, request, reason):
        return reason


def _token_user(header: str):
    key = header.split(" ", 1)[1].strip() if " " in header else ""
    token = Token.objects.select_related("user").filter(key=key).first() if key else None
    if token is None or not token.user.is_active:
        return None
    return token.user


def _authenticate(request: HttpRequest):
    """(user, error response): a `Token` header, else the session (with its CSRF check)."""
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("token "):
        user = _token_user(header)
        if user is None:
            return None, _json({"code": "authentication_failed", "detail": _("令牌无效或已过期。")}, 401)
        return user, None
    user = request.user
    if user.is_authenticated or request.session.session_key:
        # Like DRF's SessionAuthentication: a cookie-authenticated POST must carry the CSRF token.
        check = _CsrfCheck(lambda r: None)
        check.process_request(request)
        reason = check.process_view(request, None, (), {})
        if reason:
            return None, _json({"code": "csrf_failed", "detail": _("CSRF 校验失败：%(reason)s") % {"reason": reason}}, 403)
    return user, None


# --- SSE ----------------------------------------------------------------------------------------


@csrf_exempt
async def chat_stream(request: HttpRequest):
    """POST /api/chat/stream — the answer as an AI SDK UI message stream."""
    if request.method != "POST":
        return _json({"code": "method_not_allowed", "detail": _("只支持 POST。")}, 405)
    prepared = await sync_to_async(_prepare_request)(request)
    if isinstance(prepared, JsonResponse):
        return prepared
    query, requester = prepared
    runner = TurnRunner(query=query, requester=requester).start()
    preface = []
    try:
        while True:
            outcome = await runner.next()
            if outcome.kind == "error":
                return _error_json(outcome.value)
            if outcome.kind == "done":  # the pipeline always yields evidence before it ends
                return _json({"code": "internal_error", "detail": _(GENERATION_FAILED)}, 500)
            preface.append(outcome.value)
            if isinstance(outcome.value, Evidence):
                break
    except asyncio.CancelledError:
        runner.cancel()
        raise
    response = StreamingHttpResponse(_ui_message_stream(runner, preface), content_type=sse.CONTENT_TYPE)
    for name, value in sse.HEADERS.items():
        response[name] = value
    return response


def _prepare_request(request: HttpRequest):
    user, failure = _authenticate(request)
    if failure is not None:
        return failure
    request.user = user
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return _json({"code": "invalid_json", "detail": _("请求体不是合法的 JSON。")}, 400)
    if not isinstance(body, dict):
        return _json({"code": "invalid_json", "detail": _("请求体必须是 JSON 对象。")}, 400)
    serializer = ChatRequestInput(data=body)
    try:
        if not serializer.is_valid():
            detail = next(iter(serializer.errors.items()))
            return _json({"code": "invalid_request", "detail": f"{detail[0]}: {detail[1][0]}",
                          "errors": serializer.errors}, 400)
    except DomainError as exc:
        return _error_json(exc)
    return serializer.to_query(), requester_for(request)


async def _ui_message_stream(runner: TurnRunner, preface):
    started: Started = preface[0]
    text_open = False
    try:
        for part in sse.start(started):
            yield part
        for event in preface[1:]:
            if isinstance(event, Status):
                yield sse.status(event)
            elif isinstance(event, Evidence):
                yield sse.retrieval(event, started)
        yield sse.text_start()
        text_open = True
        while True:
            outcome = await runner.next()
            if outcome.kind == "done":
                return
            if outcome.kind == "error":
                for part in sse.error(_stable_message(outcome.value), text_open=text_open):
                    yield part
                return
            event = outcome.value
            if isinstance(event, Delta):
                yield sse.text_delta(event.text)
            elif isinstance(event, Status):
                yield sse.status(event)
            elif isinstance(event, Finished):
                text_open = False
                for part in sse.finish(event):
                    yield part
    except (asyncio.CancelledError, GeneratorExit):
        runner.cancel()
        raise


def _stable_message(exc: BaseException) -> str:
    if isinstance(exc, GenerationFailed):
        return str(exc.message)
    if not isinstance(exc, TurnCancelled):
        logger.error("chat stream failed after it started: %s", type(exc).__name__)
    return _(GENERATION_FAILED)


# --- JSON ---------------------------------------------------------------------------------------


def _json(payload: dict, status: int) -> JsonResponse:
    return JsonResponse(payload, status=status, json_dumps_params={"ensure_ascii": False})


def _error_json(exc: BaseException) -> JsonResponse:
    if isinstance(exc, RetrievalError):
        return _json(
            {
                "code": exc.code,
                "detail": exc.message,
                "channel_errors": [{"channel": e.channel, "error": e.error, "message": e.message} for e in exc.details],
            },
            exc.http_status,
        )
    if isinstance(exc, DomainError):
        return _json({"code": exc.code, "detail": str(exc.message), **exc.extra}, exc.http_status)
    logger.error("chat turn failed before streaming: %r", exc)
    return _json({"code": "internal_error", "detail": _(GENERATION_FAILED)}, 500)


class ChatView(APIView):
    """POST /api/chat — the same turn as `/api/chat/stream`, answered as one JSON object."""

    @extend_schema(request=ChatRequestInput, responses={200: dict})
    def post(self, request: Request) -> Response:
        serializer = ChatRequestInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = RAGService().answer(query=serializer.to_query(), requester=requester_for(request))
        return Response(result.as_dict())


class ConversationListView(GenericAPIView):
    """GET /api/chat/conversations — the requester's own conversations, newest first."""

    @extend_schema(
        parameters=[OpenApiParameter("knowledge_base_id", str, required=False)], responses={200: dict}
    )
    def get(self, request: Request) -> Response:
        conversations = selectors.conversation_summaries(
            requester=requester_for(request), kb_slug=request.query_params.get("knowledge_base_id") or None
        )
        page = self.paginate_queryset(conversations)
        items = [
            {
                "id": str(c.pk),
                "knowledge_base_id": c.knowledge_base.slug,
                "title": c.title,
                "created_at": c.created_at.isoformat(),
                "updated_at": c.updated_at.isoformat(),
            }
            for c in page
        ]
        return self.get_paginated_response(items)


class ConversationDetailView(APIView):
    """GET /api/chat/conversations/{id} — messages with the evidence each answer was shown with
    (no new retrieval: a reload shows the sources of the time)."""

    @extend_schema(responses={200: dict})
    def get(self, request: Request, conversation_id) -> Response:
        conversation = access_conversation(requester=requester_for(request), conversation_id=conversation_id)
        return Response(
            {
                "id": str(conversation.pk),
                "knowledge_base_id": conversation.knowledge_base.slug,
                "title": conversation.title,
                "created_at": conversation.created_at.isoformat(),
                "updated_at": conversation.updated_at.isoformat(),
                "messages": selectors.conversation_messages(conversation=conversation),
            }
        )
