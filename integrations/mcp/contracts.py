"""What the MCP tools answer, as typed models: the SDK publishes each as the tool's output
schema and checks every structured result against it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class KnowledgeBaseInfo(BaseModel):
    slug: str = Field(description="知识库标识，用作其他工具的 kb 参数 / The id to pass as `kb` to the other tools")
    name: str
    description: str
    active_version: int | None = Field(
        description="当前上线的版本号；为空表示尚未发布，无法回答 / The published version's number; null: nothing published yet"
    )


class KnowledgeBaseList(BaseModel):
    knowledge_bases: list[KnowledgeBaseInfo]
    truncated: bool = Field(description="仅列出前若干个 / Only the first ones are listed")


class SearchHit(BaseModel):
    rank: int
    chunk_id: int
    document_id: int
    document_title: str
    locator: dict[str, Any] = Field(description="位置：页码、工作表、幻灯片… / Where in the document: page, sheet, slide…")
    locator_label: str = Field(description="位置的文字说明，如“第 3 页” / The place in words, e.g. 第 3 页 (page 3)")
    heading_path: list[str]
    excerpt: str = Field(description="命中分块的原文 / The matched chunk's own text")
    score: float = Field(description="排序分，仅在同一次检索内可比 / Ranking score, comparable within one search only")
    relevance: float = Field(description="相关度 0–1，跨问题可比；低于 0.3 基本无证据 / Relevance in [0, 1], comparable "
                                         "across questions; below 0.3 means no evidence")
    preview_url: str | None = Field(
        description="打开该分块在 PDF 中的高亮区域（PNG，需同样的令牌）/ The chunk's highlighted PDF region (PNG, same token)"
    )


class SearchResults(BaseModel):
    knowledge_base: str
    query: str
    results: list[SearchHit]
    empty_reason: str | None = Field(description="无结果的原因代码 / Why there are no results (a code)")


class AnswerCitation(BaseModel):
    number: int = Field(description="答案中 [来源 N] 的 N / The N of [来源 N] (source N) in the answer")
    kind: str = Field(description="chunk（文档）、faq 或 web / chunk (a document), faq or web")
    title: str
    locator_label: str
    excerpt: str
    score: float
    relevance: float
    cited: bool = Field(description="答案正文是否引用了它 / Whether the answer's text cites it")
    chunk_id: int | None
    document_id: int | None
    faq_id: int | None
    knowledge_base: str
    preview_url: str | None
    url: str = Field(description="网页来源的地址 / A web source's page")


class AnswerConfidenceInfo(BaseModel):
    score: float
    level: str = Field(description="high / medium / low")
    label: str


class Answer(BaseModel):
    answer: str = Field(description="带 [来源 N] 标记的答案 / The answer, with [来源 N] (source N) markers")
    citations: list[AnswerCitation]
    confidence: AnswerConfidenceInfo
    hit_type: str
    knowledge_base: str
    kb_version: int | None
    conversation_id: str
    message_id: int
    trace_id: str
