"""The MCP server: three tools over the knowledge bases the caller may read.

Descriptions are written in Chinese and English in one string: an MCP client shows the one
string it gets to its user and its model, and nothing tells the server their language. Error
texts and labels follow the request's Accept-Language like the API's (Chinese by default); the
ones this module writes itself say both.

Each tool answers structured content (checked by the SDK against the output schema it
publishes, the models of `contracts`) and a text block with the same facts for clients that
show text only. A refusal is a tool error (`isError`) whose structured content is the API's
error body (`code`, `detail`, …).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext, gettext_noop
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from ragsite.api import error_payload
from ragsite.db import releasing
from ragsite.errors import ServerBusy
from ragsite.executors import CHAT_TURN, pool, run_admitted

from . import tools
from .auth import SCOPE_KEY, McpCaller
from .contracts import Answer, KnowledgeBaseList, SearchResults

T = TypeVar("T", bound=BaseModel)

INSTRUCTIONS = (
    "ragsite 企业知识库问答。先用 list_knowledge_bases 找到知识库的 slug，再用 search_knowledge_base 检索原文证据，"
    "或用 ask_knowledge_base 得到带 [来源 N] 引用的答案。/ ragsite enterprise knowledge-base QA. Find a knowledge "
    "base's slug with list_knowledge_bases, then retrieve cited evidence with search_knowledge_base, or get an answer "
    "citing its sources as [来源 N] (source N) with ask_knowledge_base."
)

KB_ARGUMENT = (
    "知识库的 slug（list_knowledge_bases 返回的 slug）/ The knowledge base's slug (as list_knowledge_bases returns it)"
)

LIST_DESCRIPTION = (
    "列出你有权阅读的知识库：slug、名称、简介和当前上线版本。匿名调用只能看到公开知识库。"
    " / List the knowledge bases you may read: slug, name, description and published version. Anonymous callers "
    "see the public ones only."
)
SEARCH_DESCRIPTION = (
    "在知识库当前上线版本中检索与问题相关的原文片段，返回带引用信息的结果：文档标题、位置（页码等）、原文摘录、"
    "相关度和排序分，以及可打开 PDF 高亮区域的链接。不生成答案。"
    " / Search the published version of a knowledge base for passages relevant to a query. Each result cites its "
    "document title, its place (page, sheet…), the passage's text, its relevance and ranking score, and a link "
    "to its highlighted PDF region when it has one. Writes no answer."
)
ASK_DESCRIPTION = (
    "向知识库提问，得到基于当前上线版本原文的答案；答案用 [来源 N] 标注引用，并返回这些来源、置信度、"
    "message_id 和 trace_id。信息不足时会明确说明无法确定。问答会像网页端一样被记录。"
    " / Ask a knowledge base a question and get an answer grounded in its published documents, citing them as "
    "[来源 N] (source N), with those sources, a confidence, the message_id and the trace_id. When the documents "
    "do not say, the answer says so. The turn is stored like one asked on the site."
)

# The texts this module writes itself, in both languages (see `bilingual`).
BUSY_TEXT = gettext_noop("服务器繁忙，请稍后重试。")
INVALID_ARGUMENTS_TEXT = gettext_noop("参数无效")


def bilingual(message: str) -> str:
    """A message of the catalog in Chinese and English, "中文 / English"."""
    with translation.override("zh-hans"):
        chinese = gettext(message)
    with translation.override("en"):
        english = gettext(message)
    return chinese if chinese == english else f"{chinese} / {english}"


class RagsiteMCPServer(MCPServer):
    """MCPServer whose argument errors are tool errors with the API's shape: the SDK checks
    the arguments against the input schema before a tool runs, and would answer pydantic's
    report as it is."""

    async def call_tool(self, name, arguments, context=None):
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            return invalid_arguments(exc.__cause__)


def invalid_arguments(error: ValidationError) -> CallToolResult:
    errors = [
        {"argument": ".".join(str(part) for part in item["loc"]) or "arguments", "message": item["msg"]}
        for item in error.errors(include_url=False, include_input=False)
    ]
    listed = "；".join(f"{item['argument']}: {item['message']}" for item in errors)
    return refused({"code": "invalid_arguments", "detail": f"{bilingual(INVALID_ARGUMENTS_TEXT)}: {listed}",
                    "errors": errors})


def build_server() -> MCPServer:
    server = RagsiteMCPServer(
        name="ragsite",
        title="ragsite 知识库 / ragsite knowledge bases",
        instructions=INSTRUCTIONS,
        # The SDK's subscriptions/listen stream needs a connection that outlives one request;
        # the endpoint is stateless (integrations.mcp.asgi).
        subscriptions=False,
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    server.add_tool(
        list_knowledge_bases, name="list_knowledge_bases", title="列出知识库 / List knowledge bases",
        description=LIST_DESCRIPTION, annotations=read_only,
    )
    server.add_tool(
        search_knowledge_base, name="search_knowledge_base", title="检索知识库 / Search a knowledge base",
        description=SEARCH_DESCRIPTION, annotations=read_only,
    )
    server.add_tool(
        ask_knowledge_base, name="ask_knowledge_base", title="向知识库提问 / Ask a knowledge base",
        description=ASK_DESCRIPTION,
        # It stores the turn (a conversation and its messages), but changes no knowledge.
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                    open_world_hint=False),
    )
    return server


# --- the tools ----------------------------------------------------------------------------------


async def list_knowledge_bases(ctx: Context) -> Annotated[CallToolResult, KnowledgeBaseList]:
    caller = caller_of(ctx)
    return await _run(caller, lambda: tools.list_knowledge_bases(user=caller.user), _list_text)


async def search_knowledge_base(
    kb: Annotated[str, Field(description=KB_ARGUMENT, min_length=1, max_length=64)],
    query: Annotated[str, Field(description="检索的问题或关键词 / The question or keywords to search for", min_length=1)],
    ctx: Context,
    top_k: Annotated[int, Field(
        description=f"返回的结果数，1–{tools.MAX_TOP_K} / How many results, 1–{tools.MAX_TOP_K}",
        ge=1, le=tools.MAX_TOP_K,
    )] = 5,
    filters: Annotated[list[dict[str, Any]] | None, Field(
        description=(
            '可选的文档元数据过滤条件（全部满足），如 [{"field": "部门", "op": "eq", "value": "人力资源部"}]；'
            "op 为 eq、in（value 为列表）或 range（gte / lte）；field 为 title、file_type、source_tag、created_at、"
            "updated_at、item 或文档属性名。/ Optional metadata filters on the documents, all of which must hold, e.g. "
            '[{"field": "file_type", "op": "in", "value": ["pdf", "docx"]}]; op is eq, in (a list value) or range '
            "(gte / lte); field is title, file_type, source_tag, created_at, updated_at, item or a document attribute."
        ),
        max_length=10,
    )] = None,
) -> Annotated[CallToolResult, SearchResults]:
    caller = caller_of(ctx)
    return await _run(
        caller,
        lambda: tools.search(caller=caller.request, kb=kb, query=query, top_k=top_k, filters=filters,
                             base_url=caller.base_url),
        _search_text,
    )


async def ask_knowledge_base(
    kb: Annotated[str, Field(description=KB_ARGUMENT, min_length=1, max_length=64)],
    question: Annotated[str, Field(description="要问的问题 / The question to ask", min_length=1)],
    ctx: Context,
    conversation_id: Annotated[str | None, Field(
        description="可选：继续你自己之前的某次对话（上次返回的 conversation_id），追问时会参考前文 / Optional: continue "
                    "one of your own conversations (a conversation_id returned before); follow-ups read its last turns",
    )] = None,
) -> Annotated[CallToolResult, Answer]:
    caller = caller_of(ctx)
    return await _run(
        caller,
        lambda: tools.ask(caller=caller.request, kb=kb, question=question, conversation_id=conversation_id,
                          base_url=caller.base_url),
        _answer_text,
    )


def caller_of(ctx: Context) -> McpCaller:
    """The caller the endpoint authenticated, kept in the HTTP request's scope."""
    return ctx.request_context.request.scope[SCOPE_KEY]


async def _run(caller: McpCaller, work: Callable[[], T], text: Callable[[T], str]) -> CallToolResult:
    """`work` in a chat-turn worker (its connection given back when it returns), in the
    caller's language; its result as structured content plus text, or its refusal as a tool
    error. Anything else is a fault the SDK reports as a tool error without its details."""

    def job() -> T:
        with translation.override(caller.language):
            return work()

    try:
        result = await run_admitted(pool(CHAT_TURN), releasing(job), wait=settings.RAG_CHAT_QUEUE_TIMEOUT_SECONDS)
    except tools.ToolRefused as refusal:
        return refused(refusal.body)
    except ServerBusy as exc:
        _status, body = error_payload(exc)
        return refused({**body, "detail": bilingual(BUSY_TEXT)})
    except Exception as exc:
        # What the API answers with its own error body (the database out of connections is
        # `server_busy` wherever it struck); anything else is a fault, left to the SDK.
        known = error_payload(exc)
        if known is None:
            raise
        return refused(known[1])
    return CallToolResult(
        content=[TextContent(type="text", text=text(result))],
        structured_content=result.model_dump(mode="json"),
    )


def refused(body: dict[str, Any]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=f"{body.get('detail', '')} [{body.get('code', 'error')}]")],
        structured_content=body,
        is_error=True,
    )


# --- text content -------------------------------------------------------------------------------


def _list_text(listing: KnowledgeBaseList) -> str:
    if not listing.knowledge_bases:
        return "（没有可读的知识库 / no knowledge base you may read）"
    lines = []
    for kb in listing.knowledge_bases:
        version = f"v{kb.active_version}" if kb.active_version is not None else "未发布 / unpublished"
        lines.append(f"- {kb.slug}: {kb.name} ({version})" + (f" — {kb.description}" if kb.description else ""))
    return "\n".join(lines)


def _search_text(results: SearchResults) -> str:
    if not results.results:
        return f"（无结果 / no results{': ' + results.empty_reason if results.empty_reason else ''}）"
    blocks = []
    for hit in results.results:
        place = " · ".join(part for part in (hit.document_title, hit.locator_label) if part)
        lines = [f"[{hit.rank}] {place} (relevance {hit.relevance:.2f}, score {hit.score:.4f})", hit.excerpt.strip()]
        if hit.preview_url:
            lines.append(hit.preview_url)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _answer_text(answer: Answer) -> str:
    sources = []
    for citation in answer.citations:
        place = " · ".join(part for part in (citation.title, citation.locator_label) if part)
        link = citation.preview_url or citation.url
        sources.append(f"[来源 {citation.number}] {place}" + (f" — {link}" if link else ""))
    parts = [answer.answer.strip()]
    if sources:
        parts.append("\n".join(sources))
    parts.append(json.dumps(
        {"confidence": answer.confidence.level, "message_id": answer.message_id, "trace_id": answer.trace_id,
         "conversation_id": answer.conversation_id},
        ensure_ascii=False,
    ))
    return "\n\n".join(parts)
