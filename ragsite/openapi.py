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

Every text of the schema is Chinese through `gettext_lazy` and served in the request's language
(LocaleMiddleware's Accept-Language, or `?lang=en` on /api/schema/ and /api/docs/): operations
say `extend_schema(summary=gettext_lazy(…), description=gettext_lazy(…))`, fields say
`help_text=gettext_lazy(…)`, query parameters `OpenApiParameter(…, description=gettext_lazy(…))`;
path parameters are described by name (PATH_PARAMETERS), operation groups by their path's first
segment (TAGS). Docstrings are code documentation and never reach the schema
(DISABLE_DOCSTRING_DESCRIPTIONS): they cannot be translated. tests/test_api_docs.py fails on any
text left in English in the Chinese schema, or untranslated in the English one.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy
from drf_spectacular.authentication import SessionScheme as SpectacularSessionScheme
from drf_spectacular.authentication import TokenScheme as SpectacularTokenScheme
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.throttling import ScopedRateThrottle

DESCRIPTIONS = {
    400: _("请求无效：`invalid_request`（`errors` 按字段列出原因）或具体业务错误码。"),
    401: _("`authentication_failed`（令牌错误或已过期）或 `not_authenticated`（需要登录）。"),
    403: _("`editor_required` / `publisher_required`（调用者在该知识库的角色不够）、"
           "`create_knowledge_base_denied`、`option_requires_login`（匿名调用者不能使用的选项）或 "
           "`csrf_failed`（会话用户的写操作缺少 CSRF 令牌）。"),
    404: _("`not_found` 等：对象不存在，或调用者无权读取（无权读取一律答 404）。"),
    409: _("对象当前的状态不允许此操作（如 `invalid_state`、`conflict`）。"),
    413: _("`request_too_large`：请求体超过大小限制，或上传超出限制。"),
    415: _("`unsupported_media_type`：该接口不接受此 Content-Type。"),
    422: _("对象存在，但无法生成所要求的表示（如预览图渲染失败）。"),
    429: _("`throttled`：请求过于频繁，请在 `Retry-After` 响应头给出的秒数后重试。"),
    502: _("模型服务调用失败。"),
    503: _("`server_busy`：服务器繁忙，请在 `Retry-After` 秒后重试；或依赖的服务（数据库、向量库、模型）"
           "暂不可用。"),
}


class ChannelErrorOutput(serializers.Serializer):
    channel = serializers.CharField(help_text=_("检索通道，如 \"dense:original\"。"))
    error = serializers.CharField(help_text=_("稳定的错误码，不含模型服务的原始响应。"))
    message = serializers.CharField(allow_blank=True)


class ErrorOutput(serializers.Serializer):
    """Every API error (`ragsite.api.exception_handler`, and the chat transports). A domain error
    that adds a field of its own (DomainError's `extra`) declares it here."""

    code = serializers.CharField(help_text=_("稳定的机器可读错误码，客户端据此判断。"))
    detail = serializers.CharField(help_text=_("给人看的说明，随请求语言（默认中文）。"))
    errors = serializers.JSONField(
        required=False, help_text=_("仅 `invalid_request`：按字段列出的校验错误。"),
    )
    channel_errors = ChannelErrorOutput(
        many=True, required=False, help_text=_("仅检索错误：各检索通道报告的错误。"),
    )
    options = serializers.ListField(
        child=serializers.CharField(), required=False,
        help_text=_("仅 `option_requires_login`：匿名调用者不能设置的选项。"),
    )
    retry_after = serializers.IntegerField(
        required=False, help_text=_("仅 `throttled` 与 `server_busy`：需等待的秒数（同 `Retry-After`）。"),
    )
    filter = serializers.IntegerField(
        required=False, help_text=_("仅 `invalid_filter`：出错的是第几个元数据过滤条件（从 1 开始）。"),
    )

    class Meta:
        ref_name = "Error"


class SessionScheme(SpectacularSessionScheme):
    """The project's session authentication (its own CSRF code) is the same cookie scheme."""

    target_class = "ragsite.authentication.SessionAuthentication"

    def get_security_definition(self, auto_schema):
        return {
            **super().get_security_definition(auto_schema),
            "description": _("浏览器登录后的会话 Cookie；写操作还需在 `X-CSRFToken` 请求头带上 CSRF 令牌。"),
        }


class TokenScheme(SpectacularTokenScheme):
    """`Authorization: Token …`, described for integrators (spectacular's says only the prefix)."""

    priority = 0  # over spectacular's own (-1)
    # DRF's class only: a subclass that reads the token another way (the OpenAI-compatible
    # endpoints' Bearer) describes itself under its own name.
    match_subclasses = False

    def get_security_definition(self, auto_schema):
        return {
            **super().get_security_definition(auto_schema),
            "description": _("集成方使用：请求头 `Authorization: Token <令牌>`，令牌由管理员在后台创建。"
                             "使用令牌的请求不需要 CSRF 令牌。"),
        }


@dataclass(frozen=True)
class ApiTag:
    """An operation group: `key` is the first path segment after /api/ (spectacular's tag),
    `name` and `description` what readers see, in their language."""

    key: str
    name: Promise
    description: Promise


TAGS = (
    ApiTag(
        "knowledge-bases", pgettext_lazy("API tag", "知识库"),
        _("知识库、版本、文档与 FAQ 的管理。写操作需要该知识库的编辑者或发布者角色。"),
    ),
    ApiTag(
        "retrieval", pgettext_lazy("API tag", "检索"),
        _("只检索证据、不生成答案；`explain` 另返回完整的检索追踪。"),
    ),
    ApiTag(
        "chat", pgettext_lazy("API tag", "问答"),
        _("带引用来源的问答（JSON 或流式 SSE）与对话历史。"),
    ),
    ApiTag(
        "assets", pgettext_lazy("API tag", "证据图片与预览"),
        _("答案与检索结果引用的图片和 PDF 区域预览，按知识库的读取权限校验。"),
    ),
    ApiTag("openai", pgettext_lazy("API tag", "OpenAI 兼容接口"),
           _("OpenAI Chat Completions 格式的问答与模型（知识库）列表，供 OpenAI SDK 等工具直接调用。")),
    ApiTag("admin", pgettext_lazy("API tag", "运维"), _("面向知识库编辑者的运维操作。")),
)
# The chunk previews are citation media like the assets: one group.
TAG_ALIASES = {"chunks": "assets"}

# The path parameters' meaning, by name, for every operation that has one (a view names them in
# its URL pattern only). A new name gets its entry here, or its own OpenApiParameter.
PATH_PARAMETERS = {
    "kb_id": _("知识库标识（slug），即知识库的 `id`。"),
    "number": _("版本号（`number`）。"),
    "document_id": _("文档 ID。"),
    "faq_id": _("FAQ 的 ID。"),
    "asset_id": _("图片 ID（检索结果与引用的 `assets[].id`）。"),
    "chunk_id": _("分块 ID（检索结果与引用的 `chunk_id`）。"),
    "conversation_id": _("对话 ID（问答响应的 `conversation_id`）。"),
    "model_id": _("模型 ID，即知识库标识（slug）。"),
    "message_id": _("回答的消息 ID（问答响应的 `message_id`），或 OpenAI 兼容接口返回的 `id`（`chatcmpl-…`，流式回答的也可以）。"),
}


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """`extend_schema(responses={200: X, **error_responses(409)})`."""
    return {status: OpenApiResponse(ErrorOutput, description=DESCRIPTIONS[status]) for status in statuses}


API_DESCRIPTION = _(
    "ragsite 企业知识库问答的 HTTP API：管理知识库、版本、文档与常见问题（FAQ），检索证据，"
    "以及生成带引用来源的答案。\n\n"
    "**语言**：文档默认中文；加 `?lang=en` 或请求头 `Accept-Language: en` 获取英文版"
    "（`/api/schema/?lang=en`、`/api/docs/?lang=en`）。错误的 `detail` 同样随请求语言。\n\n"
    "**认证**：集成方在请求头带 `Authorization: Token <令牌>`（令牌由管理员在后台创建）；"
    "浏览器会话用户的写操作还需 `X-CSRFToken` 请求头（否则 403 `csrf_failed`）。公开知识库的检索与问答"
    "允许匿名调用，但匿名调用者不能开启默认关闭的、耗费模型调用的选项，也不能要求超出默认数量的候选"
    "（403 `option_requires_login`）。\n\n"
    "**权限**：角色按知识库划分——读者（由可见范围决定：公开为任何人，内部为登录用户，受限为指定用户组）、"
    "编辑者、发布者；超级用户拥有全部角色。无权读取的知识库在所有接口上都返回 404；"
    "可读但无权修改时返回 403（`editor_required` / `publisher_required`）。读者只能看到生效版本的内容，"
    "仅编辑者可见的字段对读者为 `null`。\n\n"
    "**错误**：所有错误都是 JSON `{\"code\": \"…\", \"detail\": \"…\"}`；`code` 稳定，供程序判断，"
    "`detail` 供人阅读。每个接口都列出了它可能返回的错误状态码。\n\n"
    "**分页**：列表接口用 `?limit=`（默认 50，最多 200）与 `?offset=` 分页，返回 "
    "`{count, next, previous, results}`。\n\n"
    "**限制**：检索与问答按登录用户和匿名客户端 IP 限速，问答还限制同时进行中的回答数，超出返回 429 "
    "与 `Retry-After`；数据库连接耗尽时返回 503 `server_busy` 与 `Retry-After`。"
)


def describe_api(result, generator, request, public):
    """Postprocessing hook: the API's description and its tags' names and descriptions, in the
    request's language (settings cannot hold translated text: they load before the catalogs)."""
    result["info"]["description"] = API_DESCRIPTION
    result["tags"] = [{"name": tag.name, "description": tag.description} for tag in TAGS]
    return result


SSE_EVENT = {
    "type": "object",
    "properties": {
        "data": {"type": "string", "description": _("一个 UI message stream 片段的 JSON；最后一行为 `[DONE]`。")},
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
            "summary": _("提问（流式 SSE）"),
            "description": _(
                "与 `POST /api/chat` 相同的一轮问答，以 AI SDK UI message stream 协议 v1 流式返回"
                "（响应头 `x-vercel-ai-ui-message-stream: v1`），事件依次为：`start`、`start-step`、"
                "`data-status`、`data-retrieval`、`text-start`、若干 `text-delta`、`text-end`、"
                "`data-answer`、`finish-step`、`finish`，最后是 `data: [DONE]`。\n\n"
                "直到 `data-retrieval`（检索与引用）为止的一切都在响应开始前完成，这之前的失败"
                "（认证、校验、限流、无权访问）都以普通 JSON 错误返回；流开始后出错则以 `error` 事件结束。"
                "请求体只接受 JSON，与 `/api/chat` 相同，也接受 AI SDK 自己的请求体（`messages`、对话 `id`）。"
                "客户端断开连接即取消本轮回答。"
            ),
            "tags": chat.get("tags", []),
            "security": chat.get("security", []),
            "requestBody": {"content": {"application/json": body}, "required": True},
            "responses": {
                "200": {
                    "description": _("服务器推送事件（SSE），每个 `data:` 行是一个 JSON 片段。"),
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
        for parameter in parameters:
            if parameter["in"] == "path" and parameter["name"] in PATH_PARAMETERS:
                parameter.setdefault("description", PATH_PARAMETERS[parameter["name"]])
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

    def get_tags(self) -> list[str]:
        # Spectacular's tag is the path's first segment; readers see the group's translated name.
        # A segment without an ApiTag (a new group) keeps spectacular's name until it gets one.
        names = {tag.key: tag.name for tag in TAGS}
        if self.path.startswith("/v1/"):
            # The OpenAI-compatible endpoints are one group, whatever their segment (chat, models).
            return [names["openai"]]
        return [names.get(TAG_ALIASES.get(key, key), key) for key in super().get_tags()]

    def _get_paginator(self):
        # Only list reads are paginated: an upload answers its outcomes as one plain array.
        return super()._get_paginator() if self.method == "GET" else None

    def _throttled(self) -> bool:
        for throttle in self.view.get_throttles():
            if isinstance(throttle, ScopedRateThrottle) and not getattr(self.view, throttle.scope_attr, None):
                continue  # a scoped throttle without a scope on this view never limits it
            return True
        return False
