"""Reading an OpenAI chat-completions request into the chat turn's question body.

- `model` is the knowledge base's slug; `messages`' last message must be the user's question
  (text only: a string, or `text` content parts). System and developer messages are read and
  not used: ragsite answers with its own instructions, and a caller's cannot override them.
- Earlier user / assistant messages are not the turn's history: `ChatQuery` takes no history,
  only a stored conversation. Each request is a new conversation unless `ragsite.conversation_id`
  (returned with every answer) continues a stored one, whose turns the pipeline's follow-up
  handling then reads ("那 X5 呢？").
- `stream`, `stream_options.include_usage` and `user` (an end-user id for the caller's own
  bookkeeping: accepted, not stored; who asks is the token's user) are read; sampling and
  length settings (`temperature`, `top_p`, `max_tokens`, `max_completion_tokens`, `stop`,
  `seed`, penalties, `logit_bias`, `metadata`, `store`, …) are accepted and ignored: the
  deployment's rules fix them. What ragsite cannot do is refused with 400: `n` > 1, tools and
  functions, structured `response_format`, `logprobs`, and content parts that are not text.
- `ragsite` (optional, an object; `extra_body` in the SDKs) carries ragsite's own options:
  `conversation_id`, `knowledge_base_ids`, `filters`, `document_ids`, `item_ids`, and the
  retrieval options of `/api/chat` (`top_k`, `mode`, …), validated by the chat endpoint's rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from ragsite.errors import ValidationFailed

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# The options of `/api/chat` (chat.serializers.ChatRequestInput) a caller may set under `ragsite`.
RAGSITE_OPTIONS = (
    "conversation_id", "knowledge_base_ids", "filters", "document_ids", "item_ids", "top_k", "mode",
    "candidate_k", "enable_query_rewrite", "enable_rerank", "enable_parent_expansion", "enable_hyde",
)
REFUSED = {
    "tools": "tools_unsupported", "functions": "tools_unsupported", "tool_choice": "tools_unsupported",
    "function_call": "tools_unsupported", "audio": "unsupported_parameter", "prediction": "unsupported_parameter",
}
MAX_USER_CHARS = 256


@dataclass(frozen=True)
class CompletionRequest:
    model: str  # the knowledge base's slug
    stream: bool
    include_usage: bool
    # The body `/api/chat` takes (chat.serializers.ChatRequestInput), for `admit_question`.
    chat_body: dict[str, Any]
    # The text of every message the caller sent: what `usage.prompt_tokens` counts.
    prompt_text: str


def invalid(message: str, *, param: str | None, code: str = "invalid_request") -> ValidationFailed:
    return ValidationFailed(message, code=code, param=param)


def parse_completion_request(body: Any) -> CompletionRequest:
    """The request, or ValidationFailed naming the parameter at fault (`param`)."""
    if not isinstance(body, dict):
        raise invalid(_("请求体必须是 JSON 对象。"), param=None, code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise invalid(_("请提供 model（知识库标识）。"), param="model", code="missing_model")
    _refuse_unsupported(body)
    stream = _flag(body, "stream")
    include_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise invalid(_("stream_options 必须是对象。"), param="stream_options")
        include_usage = _flag(options, "include_usage", param="stream_options.include_usage")
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > MAX_USER_CHARS):
        raise invalid(_("user 必须是不超过 %(n)s 个字符的字符串。") % {"n": MAX_USER_CHARS}, param="user")
    question, prompt_text = _question(body.get("messages"))
    chat_body = {**_ragsite_options(body.get("ragsite")), "knowledge_base_id": model.strip(), "question": question}
    return CompletionRequest(model=model.strip(), stream=stream, include_usage=include_usage,
                             chat_body=chat_body, prompt_text=prompt_text)


def _flag(body: dict, name: str, *, param: str | None = None) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid(_("%(name)s 必须是 true 或 false。") % {"name": param or name}, param=param or name)
    return value


def _refuse_unsupported(body: dict) -> None:
    n = body.get("n")
    # `True == 1` in Python: a boolean is not a count.
    if n is not None and (isinstance(n, bool) or n != 1):
        raise invalid(_("只支持 n=1：每个问题只生成一个回答。"), param="n", code="unsupported_n")
    for name, code in REFUSED.items():
        if body.get(name) not in (None, [], "none"):
            raise invalid(_("不支持 %(name)s：知识库问答不调用工具或函数。") % {"name": name}, param=name, code=code)
    response_format = body.get("response_format")
    if response_format is not None and (not isinstance(response_format, dict) or response_format.get("type") != "text"):
        raise invalid(_("只支持 response_format 为 text：回答是带引用的文本。"), param="response_format",
                      code="unsupported_response_format")
    if body.get("logprobs") or body.get("top_logprobs"):
        raise invalid(_("不支持 logprobs。"), param="logprobs", code="unsupported_parameter")


def _question(messages: Any) -> tuple[str, str]:
    """(the last user message's text, every message's text)."""
    if not isinstance(messages, list) or not messages:
        raise invalid(_("messages 必须是非空数组。"), param="messages", code="invalid_messages")
    most = settings.RAG_MAX_CHAT_MESSAGES
    if len(messages) > most:
        raise invalid(_("messages 过多（最多 %(n)s 条），请开始新的对话。") % {"n": most}, param="messages",
                      code="too_many_messages")
    texts = [_message_text(message, index) for index, message in enumerate(messages)]
    last = messages[-1]
    if last["role"] != "user":
        raise invalid(_("最后一条消息必须是用户的问题（role 为 user）。"), param=f"messages[{len(messages) - 1}].role",
                      code="invalid_messages")
    return texts[-1], "\n".join(texts)


def _message_text(message: Any, index: int) -> str:
    where = f"messages[{index}]"
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        raise invalid(_("%(where)s 必须是带 role（system、developer、user 或 assistant）的对象。") % {"where": where},
                      param=f"{where}.role", code="invalid_messages")
    if message["role"] in ("tool", "function") or message.get("tool_calls") or message.get("function_call"):
        raise invalid(_("%(where)s：不支持工具或函数调用的消息。") % {"where": where}, param=where,
                      code="tools_unsupported")
    content = message.get("content")
    if content is None and message["role"] == "assistant":
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(_("%(where)s.content 必须是字符串或内容片段数组。") % {"where": where}, param=f"{where}.content",
                      code="invalid_messages")
    texts = []
    for number, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else None
            raise invalid(
                _("%(where)s.content[%(n)s]：只支持文本内容（type 为 text），不支持 %(kind)s。")
                % {"where": where, "n": number, "kind": kind or "?"},
                param=f"{where}.content[{number}]", code="unsupported_content",
            )
        texts.append(part["text"])
    return "\n".join(texts)


def _ragsite_options(options: Any) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise invalid(_("ragsite 必须是对象。"), param="ragsite")
    unknown = [key for key in options if key not in RAGSITE_OPTIONS]
    if unknown:
        raise invalid(_("ragsite 不支持选项 %(key)s。") % {"key": unknown[0]}, param=f"ragsite.{unknown[0]}")
    return dict(options)
