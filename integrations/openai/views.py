"""OpenAI-compatible transports of the chat turn: `POST /v1/chat/completions` (streamed or one
JSON object) and `GET /v1/models[/{id}]` (the knowledge bases the caller may read).

`chat_completions` is `chat.views.chat_stream`'s structure in OpenAI's wire format: admission
(authentication, rate limits, validation, a concurrent-answer slot) runs in the bounded turn
pool (`run_admitted`) and gives its database connection back before the answer; the turn runs
in `TurnRunner` (the same `RAGService` phases, stored with evidence and trace); everything up to
the evidence is decided before the response starts, so those failures are ordinary JSON errors
with their status (`Retry-After` on 429 and 503); a client that disconnects cancels the turn. A
JSON answer (`stream` false) is the same turn read to its end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.mediatypes import media_type_matches
from rest_framework.views import APIView

from chat.admission import Admitted, Refused, admit_question
from chat.contracts import TurnCancelled, TurnResult
from chat.pipeline.citations import ReadableMarkerStream
from chat.pipeline.events import Delta, Finished, Started
from chat.pipeline.rag import GENERATION_FAILED
from chat.streaming import TurnRunner
from engines.tokens import count_tokens
from ragsite.api import error_payload, exception_handler
from ragsite.authentication import SessionAuthentication
from ragsite.db import releasing
from ragsite.errors import DomainError, ServerBusy
from ragsite.executors import CHAT_TURN, pool, run_admitted
from ragsite.jsontext import InvalidJson, parse_json

from . import errors, selectors, wire
from .authentication import BearerTokenAuthentication
from .requests import CompletionRequest, parse_completion_request
from .serializers import ChatCompletionInput, ChatCompletionOutput, ModelListOutput, ModelOutput, OpenAIErrorOutput

logger = logging.getLogger(__name__)

# The API's own, with the token also read as `Bearer <token>` (what OpenAI clients send): a
# token first (a wrong one is a 401 with `WWW-Authenticate: Bearer`), else the session with its
# CSRF check for signed-in session users (a page of the site calling the API).
AUTHENTICATORS = (BearerTokenAuthentication, SessionAuthentication)

ERROR_DESCRIPTIONS = {
    400: gettext_lazy("`invalid_request_error`：请求格式错误，或 ragsite 不支持的请求（n > 1、tools、非文本内容）；`param` 指出出错的参数。"),
    401: gettext_lazy("`invalid_api_key`：令牌错误或已失效（`Authorization: Bearer <令牌>`）。"),
    403: gettext_lazy("`option_requires_login`：匿名请求了高成本的 `ragsite` 选项。"),
    404: gettext_lazy("`model_not_found`：知识库不存在，或调用者无权读取（两者回答相同）。"),
    413: gettext_lazy("`request_too_large`：请求体过大。"),
    415: gettext_lazy("`unsupported_media_type`：请求体不是 JSON。"),
    429: gettext_lazy("`throttled` 或 `too_many_streams`：请在 `Retry-After` 秒后重试。"),
    502: gettext_lazy("`generation_failed`：模型服务出错。"),
    503: gettext_lazy("`server_busy`（请在 `Retry-After` 秒后重试），或依赖的服务不可用。"),
}


# Before OpenAPI 3.2 an event stream's schema describes each event.
CHUNK_EVENT = {
    "type": "object",
    "properties": {"data": {"type": "string", "description": gettext_lazy("一个 JSON 格式的 chat.completion.chunk、一个 `{\"error\": {...}}` 对象，或最后的 `[DONE]`。")}},
    "required": ["data"],
}


def openai_errors(*statuses: int) -> dict[int, OpenApiResponse]:
    return {status: OpenApiResponse(OpenAIErrorOutput, description=ERROR_DESCRIPTIONS[status]) for status in statuses}


# --- who is asking ------------------------------------------------------------------------------


class _LeftToTheView(BaseParser):
    """The view reads the body itself: authentication must not parse it."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return {}


@dataclass(frozen=True)
class Prepared:
    request: CompletionRequest
    admission: Admitted


def _authenticate(request: HttpRequest):
    """(user, None), or (None, the 401 or 403 response)."""
    try:
        return Request(request, parsers=[_LeftToTheView()], authenticators=[cls() for cls in AUTHENTICATORS]).user, None
    except AuthenticationFailed as exc:
        body = errors.error_body(status=401, code="invalid_api_key", message=str(exc.detail))
        reply = errors.response(body, 401)
        reply["WWW-Authenticate"] = BearerTokenAuthentication().authenticate_header(request)
        return None, reply
    except PermissionDenied as exc:  # the CSRF check of a signed-in session (ragsite.authentication)
        return None, errors.response(errors.error_body(status=403, code=str(exc.get_codes()), message=str(exc.detail)), 403)


# --- POST /v1/chat/completions ------------------------------------------------------------------


@csrf_exempt
async def chat_completions(request: HttpRequest):
    if request.method != "POST":
        return errors.response(errors.error_body(status=405, code="method_not_allowed", message=_("只支持 POST。")), 405)
    try:
        prepared = await run_admitted(pool(CHAT_TURN), releasing(lambda: _prepare_request(request)),
                                      wait=settings.RAG_CHAT_QUEUE_TIMEOUT_SECONDS, discard=_give_back)
    except ServerBusy as exc:
        return errors.exception_response(exc)
    if isinstance(prepared, JsonResponse):
        return prepared
    admission = prepared.admission
    runner = TurnRunner(query=admission.query, requester=admission.requester).start_holding(admission.slot)
    if not prepared.request.stream:
        return await _answer_whole(runner, prepared)
    try:
        preface = await runner.preface()
    except BaseException:
        admission.slot.release()
        raise
    if not preface.complete:
        admission.slot.release()
        return _turn_error(preface.error) if preface.error is not None else errors.internal_error(_(GENERATION_FAILED))
    # `RAGService.prepare` yields it first.
    started = next(event for event in preface.events if isinstance(event, Started))
    writer = wire.ChunkWriter(id=wire.stream_id(started.trace_id), model=prepared.request.model,
                              created=int(time.time()))
    response = StreamingHttpResponse(_chunks(runner, prepared, writer), content_type=wire.CONTENT_TYPE)
    for name, value in wire.HEADERS.items():
        response[name] = value
    return response


def _prepare_request(request: HttpRequest):
    """Prepared, or the error response; in this order: body size, authentication, media type,
    JSON, the request's OpenAI fields, then the chat admission (rate limits, validation,
    concurrent answers). A request malformed as a chat completion is refused before the rate
    count: it costs no more than the token lookup, and a question it is not."""
    try:
        raw = request.body
    except RequestDataTooBig:
        return errors.response(errors.error_body(status=413, code="request_too_large", message=_("请求体过大。")), 413)
    user, failure = _authenticate(request)
    if failure is not None:
        return failure
    request.user = user
    if raw and not media_type_matches(JSONParser.media_type, request.content_type or ""):
        return errors.response(errors.error_body(
            status=415, code="unsupported_media_type", message=_("请求体必须是 JSON（Content-Type: application/json）。"),
        ), 415)
    try:
        body = parse_json(raw or b"{}")
    except InvalidJson:
        return errors.response(errors.error_body(status=400, code="invalid_json", message=_("请求体不是合法的 JSON。")), 400)
    try:
        completion = parse_completion_request(body)
    except DomainError as exc:
        return errors.exception_response(exc)
    admission = admit_question(caller=request, body=completion.chat_body, session=request.session)
    if isinstance(admission, Refused):
        return errors.ragsite_error_response(admission.status, admission.body)
    return Prepared(request=completion, admission=admission)


def _give_back(prepared) -> None:
    """An admission whose request is gone: free its answer slot."""
    if isinstance(prepared, Prepared):
        prepared.admission.slot.release()



async def _answer_whole(runner: TurnRunner, prepared: Prepared) -> JsonResponse:
    """The turn read to its end, answered as one `chat.completion`."""
    slot = prepared.admission.slot
    result: TurnResult | None = None
    try:
        while True:
            outcome = await runner.next()
            if outcome.kind == "error":
                return _turn_error(outcome.value)
            if outcome.kind == "done":
                break
            if isinstance(outcome.value, Finished):
                result = outcome.value.result
    except asyncio.CancelledError:
        runner.cancel()
        raise
    finally:
        slot.release()
    if result is None:
        return errors.internal_error(_(GENERATION_FAILED))
    tokens = await _usage(prepared.request, result.answer)
    body = wire.completion(result, model=prepared.request.model, created=int(time.time()), tokens=tokens)
    return JsonResponse(body, json_dumps_params={"ensure_ascii": False})


async def _chunks(runner: TurnRunner, prepared: Prepared, writer: wire.ChunkWriter):
    markers = ReadableMarkerStream()
    try:
        yield writer.role()
        while True:
            outcome = await runner.next_coalesced()
            if outcome.kind == "done":
                yield wire.DONE
                return
            if outcome.kind == "error":
                yield wire.encode(_stream_error(outcome.value))
                return
            event = outcome.value
            if isinstance(event, Delta):
                text = markers.feed(event.text)
                if text:
                    yield writer.delta(text)
            elif isinstance(event, Finished):
                rest = markers.flush()
                if rest:
                    yield writer.delta(rest)
                yield writer.stop(event.result)
                if prepared.request.include_usage:
                    yield writer.usage(await _usage(prepared.request, event.result.answer))
    except (asyncio.CancelledError, GeneratorExit):
        runner.cancel()
        raise
    finally:
        prepared.admission.slot.release()


async def _usage(request: CompletionRequest, answer: str) -> dict[str, int]:
    # The tokenizer computes: off the event loop, in the turn pool like the turn's other work.
    loop = asyncio.get_running_loop()
    prompt, completion = await loop.run_in_executor(
        pool(CHAT_TURN), lambda: (count_tokens(request.prompt_text), count_tokens(answer))
    )
    return wire.usage(prompt, completion)


def _turn_error(exc: BaseException) -> JsonResponse:
    known = errors.exception_response(exc)
    if known is not None:
        return known
    logger.error("chat completion failed before answering: %r", exc)
    return errors.internal_error(_(GENERATION_FAILED))


def _stream_error(exc: BaseException) -> dict:
    """The `error` chunk of a failure after the stream started: a stable message, the code."""
    known = error_payload(exc)  # GenerationFailed included: a ChatError, 502 with its message
    if known is not None:
        return errors.from_ragsite(*known)
    if not isinstance(exc, TurnCancelled):
        logger.error("chat completion stream failed after it started: %s", type(exc).__name__)
    return errors.error_body(status=500, code="internal_error", message=_(GENERATION_FAILED))


class ChatCompletionsView(APIView):
    """The schema of `chat_completions`, an async view (DRF views do not stream into ASGI):
    spectacular reads an endpoint's operations off its callback's `cls`."""

    authentication_classes = AUTHENTICATORS

    @extend_schema(
        operation_id="openai_chat_completions_create",
        summary=gettext_lazy("OpenAI 兼容的对话补全"),
        description=gettext_lazy(
            "与 /api/chat 相同的一轮问答（同一流水线，保存证据与追踪），以 OpenAI Chat Completions 格式返回。"
            "model 为知识库标识；最后一条 user 消息是问题；stream 为 true 时返回 chat.completion.chunk 事件流，"
            "以 data: [DONE] 结束。引用、置信度与消息编号在扩展字段 ragsite 中。"
        ),
        request=ChatCompletionInput,
        responses={
            (200, "application/json"): OpenApiResponse(
                ChatCompletionOutput, description=gettext_lazy("`stream` 为 false：一个 chat.completion。`stream` 为 true：服务器推送事件，每行 `data:` 一个 chat.completion.chunk（带 finish_reason 的那个同时带 `ragsite`），最后是 `data: [DONE]`。")),
            (200, "text/event-stream"): OpenApiResponse(CHUNK_EVENT),
            **openai_errors(400, 401, 403, 404, 413, 415, 429, 502, 503),
        },
    )
    def post(self, request: Request) -> Response:  # pragma: no cover — never routed (see above)
        raise NotImplementedError


chat_completions.cls = ChatCompletionsView
chat_completions.initkwargs = {}


# --- GET /v1/models -----------------------------------------------------------------------------


def openai_exception_handler(exc, context):
    """The API's exception handler, its body in OpenAI's shape."""
    response = exception_handler(exc, context)
    if response is not None and isinstance(response.data, dict) and "code" in response.data:
        response.data = errors.from_ragsite(response.status_code, response.data)
    return response


class OpenAIView(APIView):
    authentication_classes = AUTHENTICATORS

    def get_exception_handler(self):
        return openai_exception_handler


class ModelListView(OpenAIView):
    @extend_schema(
        operation_id="openai_models_list",
        summary=gettext_lazy("可用模型（知识库）列表"),
        description=gettext_lazy("调用者可读的知识库，每个作为一个模型：id 为知识库标识，created 为创建时间（Unix 秒）。"),
        responses={200: ModelListOutput, **openai_errors(401, 503)},
    )
    def get(self, request: Request) -> Response:
        models = [wire.model_object(slug=kb.slug, created=int(kb.created_at.timestamp()))
                  for kb in selectors.readable_models(user=request.user)]
        return Response({"object": "list", "data": models})


class ModelDetailView(OpenAIView):
    @extend_schema(
        operation_id="openai_models_retrieve",
        summary=gettext_lazy("单个模型（知识库）"),
        description=gettext_lazy("调用者无权读取的知识库与不存在的知识库一样返回 404。"),
        responses={200: ModelOutput, **openai_errors(401, 404, 503)},
    )
    def get(self, request: Request, model_id: str) -> Response:
        kb = selectors.model(user=request.user, model_id=model_id)
        return Response(wire.model_object(slug=kb.slug, created=int(kb.created_at.timestamp())))
