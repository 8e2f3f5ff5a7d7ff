"""Chat transports over one `RAGService`: SSE (AI SDK UI message stream), JSON, history.

The SSE view runs preparation (validation, access, routing, retrieval, citations) before the
response starts, so every failure up to then is an ordinary JSON error with a code; the stream
itself carries only the answer and, if something breaks later, an `error` part with a stable
message. A client that disconnects cancels the turn.
"""

from __future__ import annotations

import asyncio
import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.utils.timezone import localtime
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied, UnsupportedMediaType
from rest_framework.generics import GenericAPIView
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.mediatypes import media_type_matches
from rest_framework.views import APIView

from ragsite.api import error_payload, retry_after_headers
from ragsite.authentication import SessionAuthentication
from ragsite.db import releasing
from ragsite.errors import ServerBusy
from ragsite.executors import CHAT_TURN, pool, run_admitted
from ragsite.jsontext import InvalidJson, parse_json
from ragsite.openapi import error_responses

from . import selectors, sse
from .admission import Refused, admit_question
from .access import access_conversation, requester_of
from .contracts import GenerationFailed, Requester, TurnCancelled
from .pipeline.events import Delta, Evidence, Finished, Started, Status
from .pipeline.rag import GENERATION_FAILED, RAGService
from .serializers import ChatRequestInput, ChatTurnOutput, ConversationDetailOutput, ConversationOutput
from .streaming import TurnRunner

logger = logging.getLogger(__name__)


# --- who is asking ------------------------------------------------------------------------------

# DRF's own authenticators, as on every API view: a `Token` header, else the session with its
# CSRF check (enforced for signed-in session users, as DRF does).
AUTHENTICATORS = (TokenAuthentication, SessionAuthentication)


def requester_for(request) -> Requester:
    """Who reads (history): never claims a session; asking goes through the admission."""
    return requester_of(user=request.user, session=request.session, claim_session=False)


class _LeftToTheView(BaseParser):
    """The view reads the body itself, with its own error codes. Authentication must not parse
    it: the CSRF check reads `request.POST`, and a parser failing there (a body that is not
    JSON, or malformed) would escape as a 500."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return {}


def _authenticate(request: HttpRequest):
    """(user, None), or (None, the JSON error response)."""
    try:
        drf_request = Request(request, parsers=[_LeftToTheView()], authenticators=[cls() for cls in AUTHENTICATORS])
        return drf_request.user, None
    except AuthenticationFailed:
        return None, _json({"code": "authentication_failed", "detail": _("令牌无效或已过期。")}, 401)
    except PermissionDenied as exc:  # the CSRF check (ragsite.authentication)
        return None, _json({"code": exc.get_codes(), "detail": str(exc.detail)}, 403)


# --- SSE ----------------------------------------------------------------------------------------


@csrf_exempt
async def chat_stream(request: HttpRequest):
    """POST /api/chat/stream — the answer as an AI SDK UI message stream."""
    if request.method != "POST":
        return _json({"code": "method_not_allowed", "detail": _("只支持 POST。")}, 405)
    # Admission (sign-in, limits, the session) runs where the turn's stages run, behind the same
    # bounded wait: under overload a request is refused with 503 within that wait instead of
    # queueing its work in a thread of its own.
    try:
        prepared = await run_admitted(pool(CHAT_TURN), releasing(lambda: _prepare_request(request)),
                                      wait=settings.RAG_CHAT_QUEUE_TIMEOUT_SECONDS, discard=_give_back)
    except ServerBusy as exc:
        return _error_json(exc)
    if isinstance(prepared, JsonResponse):
        return prepared
    query, requester, slot = prepared
    runner = TurnRunner(query=query, requester=requester).start_holding(slot)
    try:
        preface = await runner.preface()
    except BaseException:
        slot.release()
        raise
    if not preface.complete:
        slot.release()
        if preface.error is not None:
            return _error_json(preface.error)
        return _json({"code": "internal_error", "detail": _(GENERATION_FAILED)}, 500)
    response = StreamingHttpResponse(_ui_message_stream(runner, list(preface.events), slot), content_type=sse.CONTENT_TYPE)
    for name, value in sse.HEADERS.items():
        response[name] = value
    return response


def _prepare_request(request: HttpRequest):
    """(query, requester, stream slot), or the JSON error response; in this order: body size,
    authentication (CSRF), media type, JSON, then the streaming transports' admission (rate
    limits, validation, concurrent streams)."""
    try:
        raw = request.body  # read before DRF's CSRF check parses the request (Django keeps it then)
    except RequestDataTooBig:
        return _json({"code": "request_too_large", "detail": _("请求体过大。")}, 413)
    user, failure = _authenticate(request)
    if failure is not None:
        return failure
    request.user = user
    if raw and not media_type_matches(JSONParser.media_type, request.content_type or ""):
        # As /api/chat answers it (DRF's own refusal): the stream reads JSON only.
        refusal = UnsupportedMediaType(request.content_type)
        return _json({"code": refusal.default_code, "detail": str(refusal.detail)}, refusal.status_code)
    try:
        body = parse_json(raw or b"{}")
    except InvalidJson:
        return _json({"code": "invalid_json", "detail": _("请求体不是合法的 JSON。")}, 400)
    if not isinstance(body, dict):
        return _json({"code": "invalid_json", "detail": _("请求体必须是 JSON 对象。")}, 400)
    admission = admit_question(caller=request, body=body, session=request.session)
    if isinstance(admission, Refused):
        return _json(admission.body, admission.status)
    return admission.query, admission.requester, admission.slot


def _give_back(prepared) -> None:
    """An admission whose request is gone (the reader left while it ran): free its stream slot."""
    if not isinstance(prepared, JsonResponse):
        prepared[2].release()



async def _ui_message_stream(runner: TurnRunner, preface, slot):
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
            outcome = await runner.next_coalesced()
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
    finally:
        slot.release()


def _stable_message(exc: BaseException) -> str:
    """The `error` part's text: the AI SDK part carries a message only, so an error the API
    knows (too busy, storage unavailable) says its own stable detail."""
    if isinstance(exc, GenerationFailed):
        return str(exc.message)
    known = error_payload(exc)
    if known is not None:
        return known[1]["detail"]
    if not isinstance(exc, TurnCancelled):
        logger.error("chat stream failed after it started: %s", type(exc).__name__)
    return _(GENERATION_FAILED)


# --- JSON ---------------------------------------------------------------------------------------


def _json(payload: dict, status: int) -> JsonResponse:
    response = JsonResponse(payload, status=status, json_dumps_params={"ensure_ascii": False})
    for name, value in retry_after_headers(payload).items():
        response[name] = value
    return response


def _error_json(exc: BaseException) -> JsonResponse:
    known = error_payload(exc)
    if known is not None:
        status, body = known
        return _json(body, status)
    logger.error("chat turn failed before streaming: %r", exc)
    return _json({"code": "internal_error", "detail": _(GENERATION_FAILED)}, 500)


class ChatView(APIView):
    """POST /api/chat — the same turn as `/api/chat/stream`, answered as one JSON object, let in
    by the same admission: its rate limits, and a slot of the caller's concurrent answers held
    until the turn ends (a JSON answer costs the server what a stream costs)."""

    throttle_classes = ()  # the admission's: one count per question, as on the other transports

    # 403: costly options asked for anonymously; 404: a knowledge base or conversation the caller
    # may not read; 429: rate limit or concurrent answers; 502 / 503: the model or the database
    # failed (the question is kept).
    @extend_schema(
        summary=gettext_lazy("提问（JSON）"),
        description=gettext_lazy(
            "对一个知识库（或用 `knowledge_base_ids` 同时对多个知识库）"
            "提问：检索证据并生成带引用（`[来源 N]`）的答案，一次性以 JSON 返回；"
            "与 `POST /api/chat/stream` 是同一轮问答。传 `conversation_id` 继续已有对话，"
            "不传则新建对话。也接受 AI SDK 的请求体（`messages`，"
            "取最后一条用户消息的文本）。公开知识库允许匿名提问，"
            "但匿名调用者不能开启默认关闭的耗费模型调用的选项（403 `option_requires_login`）。"
            "按登录用户与匿名 IP 限速，并限制同时进行中的回答数（429）；"
            "模型调用失败返回 502，数据库繁忙返回 503，这两种情况下问题会保留在对话中。"
        ),
        request=ChatRequestInput, responses={200: ChatTurnOutput, **error_responses(403, 404, 429, 502, 503)},
    )
    def post(self, request: Request) -> Response:
        admission = admit_question(caller=request, body=request.data, session=request.session)
        if isinstance(admission, Refused):
            return Response(admission.body, status=admission.status, headers=retry_after_headers(admission.body))
        with admission.slot.held():
            result = RAGService().answer(query=admission.query, requester=admission.requester)
        return Response(result.as_dict())


class ConversationListView(GenericAPIView):
    """GET /api/chat/conversations — the requester's own conversations, newest first."""

    @extend_schema(
        summary=gettext_lazy("列出我的对话"),
        description=gettext_lazy(
            "从新到旧分页返回调用者自己的对话，可用 `knowledge_base_id` 只看一个知识库的对话。"
            "登录用户看到自己的对话；匿名用户看到当前浏览器会话中的对话。"
        ),
        operation_id="chat_conversations_list",
        parameters=[OpenApiParameter(
            "knowledge_base_id", str, required=False,
            description=gettext_lazy("只返回这个知识库（标识）的对话。"),
        )],
        responses=ConversationOutput(many=True),
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
                "created_at": localtime(c.created_at).isoformat(),
                "updated_at": localtime(c.updated_at).isoformat(),
            }
            for c in page
        ]
        return self.get_paginated_response(items)


class ConversationDetailView(APIView):
    """GET /api/chat/conversations/{id} — messages with the evidence each answer was shown with
    (no new retrieval: a reload shows the sources of the time)."""

    @extend_schema(
        summary=gettext_lazy("获取对话"),
        description=gettext_lazy(
            "返回对话的全部消息，以及每个答案当时展示的证据与引用（不会重新检索："
            "重新加载看到的是当时的来源）。对话只属于其所有者，其他人读取返回 404。"
        ),
        operation_id="chat_conversation_retrieve", responses=ConversationDetailOutput,
    )
    def get(self, request: Request, conversation_id) -> Response:
        conversation = access_conversation(requester=requester_for(request), conversation_id=conversation_id)
        return Response(
            {
                "id": str(conversation.pk),
                "knowledge_base_id": conversation.knowledge_base.slug,
                "title": conversation.title,
                "created_at": localtime(conversation.created_at).isoformat(),
                "updated_at": localtime(conversation.updated_at).isoformat(),
                "messages": selectors.conversation_messages(conversation=conversation),
            }
        )
