"""What the codes of a retrieval trace mean, in words staff read (the codes stay in the JSON).

Every function here takes a code as retrieval writes it and returns its words in the active
language; a code these tables do not know (written by a newer or older release) is returned as it
is, so a page never fails on it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext, pgettext_lazy

from knowledge.locators import locator_label
from knowledge.models import ContentType

from .contracts import ATTRIBUTE_FIELD_PREFIX, MetadataFilter, RetrievalResult, RetrievalTrace

STAGES = {
    "facts": gettext_lazy("就绪文档"),
    "cache_lookup": gettext_lazy("缓存查找"),
    "rewrite": gettext_lazy("查询改写"),
    "recall": gettext_lazy("召回（各通道并行）"),
    "fusion": gettext_lazy("融合"),
    "rerank": gettext_lazy("重排"),
    "parent_expansion": gettext_lazy("上下文扩展"),
    "assets": gettext_lazy("图片"),
}
MODES = {
    "hybrid": gettext_lazy("混合检索（语义 + 关键词）"),
    "dense": gettext_lazy("语义检索"),
    "sparse": gettext_lazy("关键词检索"),
}
CHANNELS = {
    "dense": gettext_lazy("语义检索"),
    "sparse": gettext_lazy("关键词检索"),
    "faq_dense": gettext_lazy("FAQ 语义检索"),
    "faq_sparse": gettext_lazy("FAQ 关键词检索"),
    "web": gettext_lazy("网络搜索"),
}
# The wordings a question is searched with: itself, the conversation's readings of it
# ("context", "context2", …), its Chinese words when asked in English, a rewrite, a HyDE answer.
VARIANTS = {
    "original": pgettext_lazy("query variant", "原问题"),
    "context": pgettext_lazy("query variant", "结合上文"),
    "chinese": pgettext_lazy("query variant", "中文关键词"),
    "rewrite": pgettext_lazy("query variant", "改写"),
    "hyde": pgettext_lazy("query variant", "假设答案"),
}
NOTES = {
    "rerank_unavailable": gettext_lazy("本地模型没有能提升效果的重排模型，未重排"),
    "hyde_unavailable": gettext_lazy("当前模型不能生成假设答案，未使用假设答案检索"),
    "dynamic_top_k_needs_rerank": gettext_lazy("动态返回条数需要重排分数，未启用"),
    "web_search_unavailable": gettext_lazy("该知识库未开启网络搜索或部署未配置搜索服务，未检索网络"),
    "web_search_uncached": gettext_lazy("同时检索了网络：结果不读取也不写入缓存"),
}
COUNTS = {"fused": gettext_lazy("融合后"), "reranked": gettext_lazy("已重排")}
# Which expression restricted the vector store to the version's ready documents.
DOCUMENT_FILTERS = {
    "none": gettext_lazy("无（所有文档都已就绪）"),
    "in": gettext_lazy("只检索已就绪的文档"),
    "not_in": gettext_lazy("排除未就绪的文档"),
    "mixed": gettext_lazy("各知识库不同"),
}
EMPTY_REASONS = {
    "no_active_version": gettext_lazy("知识库尚未发布版本"),
    "no_ready_documents": gettext_lazy("没有已就绪的文档"),
    "document_ids_not_ready": gettext_lazy("限定的文档都未就绪"),
    "no_document_matches_filters": gettext_lazy("没有符合元数据筛选条件的已就绪文档"),
}
# The built-in fields a metadata filter may name; any other field is a key of the documents'
# own metadata, shown as it is.
FILTER_FIELDS = {
    "title": gettext_lazy("标题"),
    "file_type": gettext_lazy("文件类型"),
    "source_tag": gettext_lazy("来源标签"),
    "created_at": gettext_lazy("上传时间"),
    "updated_at": gettext_lazy("更新时间"),
    "item": pgettext_lazy("metadata filter field", "商品/型号"),
}
# Degradation codes retrieval writes; a failed channel carries its variant after a colon
# ("dense_failed:original"), labelled by `degradation_label`.
DEGRADATIONS = {
    "query_rewrite_failed": gettext_lazy("查询改写失败"),
    "faq_search_failed": gettext_lazy("FAQ 检索失败"),
    "dense_failed": gettext_lazy("语义检索失败"),
    "sparse_failed": gettext_lazy("关键词检索失败"),
    "hyde_failed": gettext_lazy("假设答案检索失败"),
    "rerank_failed": gettext_lazy("重排失败"),
    "parent_expansion_failed": gettext_lazy("上下文扩展失败"),
    "web_search_failed": gettext_lazy("网络搜索失败"),
}
CACHE_STAGES = {
    # The knowledge base pages' name for the epoch, in a context of its own: the bare msgid
    # is worded by those pages.
    "epoch": pgettext_lazy("cache", "缓存版本"),
    "query_embedding": gettext_lazy("问题向量"),
    "doc_retrieval": gettext_lazy("文档检索结果"),
    "faq_retrieval": gettext_lazy("FAQ 检索结果"),
}
# Where the cache epoch was read: this process's memory, or the database behind it.
CACHE_SOURCES = {"l1": gettext_lazy("进程内存"), "l3": gettext_lazy("数据库")}

_CONTEXT_VARIANT = re.compile(r"context(\d+)")
_RRF = re.compile(r"rrf\(k=([\d.]+)\)")
_CONVEX = re.compile(r"convex\(minmax, dense=([\d.]+)\)")


def detailed(name: str, detail: str) -> str:
    """"语义检索", "原问题" → "语义检索（原问题）" (English puts its own parentheses)."""
    return _("%(name)s（%(detail)s）") % {"name": name, "detail": detail}


def joined(items: Iterable[str]) -> str:
    """Items of a list in a sentence: "来源 1、来源 4"."""
    return pgettext("list separator", "、").join(items)


def count_label(name: str) -> str:
    return str(COUNTS[name]) if name in COUNTS else channel_label(name)


def stage_label(stage: str) -> str:
    if stage.startswith("channel:"):
        return channel_label(stage.removeprefix("channel:"))
    return str(STAGES.get(stage, stage))


def variant_label(variant: str) -> str:
    """"original" → "原问题"; "context2" → "结合上文 2"."""
    if variant in VARIANTS:
        return str(VARIANTS[variant])
    numbered = _CONTEXT_VARIANT.fullmatch(variant)
    if numbered:
        return f"{VARIANTS['context']} {numbered.group(1)}"
    return variant


def channel_label(name: str) -> str:
    """"dense:original" → "语义检索（原问题）"; unknown parts stay as they are."""
    kind, _sep, variant = name.partition(":")
    label = str(CHANNELS.get(kind, STAGES.get(kind, kind)))
    return detailed(label, variant_label(variant)) if variant else label


def mode_label(mode: str) -> str:
    return str(MODES.get(mode, mode))


def note_label(note: str) -> str:
    if note.startswith("dynamic_top_k:"):
        return _("动态返回条数：保留 %(n)s 条") % {"n": note.partition(":")[2]}
    return str(NOTES.get(note, note))


def content_type_label(content_type: str) -> str:
    return str(dict(ContentType.choices).get(content_type, content_type))


def document_filter_label(kind: str) -> str:
    return str(DOCUMENT_FILTERS.get(kind, kind))


def empty_reason_label(reason: str) -> str:
    return str(EMPTY_REASONS.get(reason, reason))


def fusion_label(fusion: str) -> str:
    """"rrf(k=60)" → "倒数排名融合（k=60）"; "convex(minmax, dense=0.5)" → "加权融合（语义权重 0.5）"."""
    if fusion == "none":
        return _("未融合（只有一路结果）")
    rrf = _RRF.fullmatch(fusion)
    if rrf:
        return _("倒数排名融合（k=%(k)s）") % {"k": rrf.group(1)}
    convex = _CONVEX.fullmatch(fusion)
    if convex:
        return _("加权融合（语义权重 %(weight)s）") % {"weight": convex.group(1)}
    return fusion


# How far the scores fell where dynamic top-k cut them (`DynamicTopKTrace.cliff`).
CLIFFS = {
    "relative": gettext_lazy("比上一条下降超过 25%"),
    "absolute": gettext_lazy("比上一条下降超过 0.5"),
}


def hyde_label(hyde: Mapping[str, Any]) -> str:
    """A HyDE trace (`HydeTrace.as_dict()`, as returned or as stored) in a sentence: whether it
    ran, with which model, how long the model took and how long its text was."""
    values = {"model": hyde.get("model") or "—", "ms": hyde.get("elapsed_ms", "—"),
              "chars": hyde.get("hypothesis_chars", 0)}
    status = hyde.get("status")
    if status == "ran":
        return _("已使用假设答案检索：模型 %(model)s 用时 %(ms)s 毫秒写出 %(chars)s 字，与原问题一起向量化") % values
    if status == "empty":
        return _("模型 %(model)s 未写出假设答案（用时 %(ms)s 毫秒），只用原问题检索") % values
    if status == "failed":
        return _("假设答案检索失败（模型 %(model)s，用时 %(ms)s 毫秒），已使用原问题的检索结果") % values
    return str(status or "—")


def dynamic_top_k_label(dynamic: Mapping[str, Any]) -> str:
    """A dynamic top-k trace (`DynamicTopKTrace.as_dict()`) in a sentence: how many results were
    kept of at most how many, and where and why the scores were cut."""
    values = {"kept": dynamic.get("kept"), "max": dynamic.get("max_k")}
    index = dynamic.get("cut_index")
    if not isinstance(index, int):
        return _("动态返回条数：保留 %(kept)s 条（最多 %(max)s 条），重排分没有明显落差") % values
    cliff = dynamic.get("cliff") or ""
    return _(
        "动态返回条数：保留 %(kept)s 条（最多 %(max)s 条），从第 %(position)s 条起截断："
        "重排分 %(before)s → %(after)s，%(reason)s"
    ) % {**values, "position": index + 1, "before": _score(dynamic.get("score_before")),
         "after": _score(dynamic.get("score_after")), "reason": str(CLIFFS.get(cliff, cliff))}


def _score(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, int | float) else "—"


def degradation_label(code: str, labels: Mapping[str, Any] | None = None) -> str:
    """"sparse_failed:original" → "关键词检索失败（原问题）"; `labels` adds a caller's own codes."""
    base, _sep, variant = code.partition(":")
    label = str((DEGRADATIONS if labels is None else labels).get(base, base))
    return detailed(label, variant_label(variant)) if variant else label


def cache_event_label(stage: str, hit: bool, source_type: str = "") -> str:
    """"epoch", hit, "l1" → "缓存版本（进程内存）：命中"."""
    label = str(CACHE_STAGES.get(stage, stage))
    if source_type in CACHE_SOURCES:
        label = detailed(label, str(CACHE_SOURCES[source_type]))
    result = pgettext("cache event", "命中") if hit else pgettext("cache event", "未命中")
    return _("%(stage)s：%(result)s") % {"stage": label, "result": result}


def cache_event_code(stage: str, hit: bool, source_type: str = "") -> str:
    """The event as the JSON spells it, for a tooltip: "epoch/l1:hit"."""
    return f"{stage}{'/' + source_type if source_type else ''}:{'hit' if hit else 'miss'}"


def filter_label(data: Mapping[str, Any]) -> str:
    """A metadata filter as `MetadataFilter.as_dict()` writes it (a stored trace holds that), in
    words: "部门 = 人力资源部", "文件类型 是 pdf、docx 之一", "生效日期 从 2025-01-01 到 2025-12-31"."""
    field = str(data.get("field", ""))
    name = str(FILTER_FIELDS[field]) if field in FILTER_FIELDS else field.removeprefix(ATTRIBUTE_FIELD_PREFIX)
    op = data.get("op")
    if op == "range":
        low, high = data.get("gte"), data.get("lte")
        if low is not None and high is not None:
            return _("%(field)s 从 %(low)s 到 %(high)s") % {"field": name, "low": low, "high": high}
        if low is not None:
            return _("%(field)s ≥ %(low)s") % {"field": name, "low": low}
        return _("%(field)s ≤ %(high)s") % {"field": name, "high": high}
    value = data.get("value")
    if op == "in" and isinstance(value, list | tuple):
        return _("%(field)s 是 %(values)s 之一") % {"field": name, "values": joined(_shown(v) for v in value)}
    return _("%(field)s = %(value)s") % {"field": name, "value": _shown(value)}


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def filters_summary(trace: RetrievalTrace) -> str:
    """"就绪文档 120 篇中有 8 篇符合筛选条件"; "" without filters."""
    if not trace.filters:
        return ""
    return _("就绪文档 %(ready)s 篇中有 %(admitted)s 篇符合筛选条件") % {
        "ready": trace.filter_ready_count, "admitted": trace.filter_admitted_count}


def filter_rows(filters: Iterable[MetadataFilter]) -> list[tuple[str, str]]:
    """(words, the filter's JSON for a tooltip) of each filter."""
    return [(filter_label(f.as_dict()), json.dumps(f.as_dict(), ensure_ascii=False)) for f in filters]


# --- a whole result or trace, in words, for the hit-test page -----------------------------------


# A web result is none of the knowledge base's content: every page that lists results says so.
WEB_SOURCE = gettext_lazy("网络来源（非知识库内容）")


def describe_result(result: RetrievalResult) -> dict[str, Any]:
    return {
        "result": result,
        "web_label": str(WEB_SOURCE) if result.from_web else "",
        "content_type": content_type_label(result.content_type),
        "sources": [(channel_label(source), source) for source in result.rank_sources],
        "locator": locator_label(result.locator),
        "heading_path": " › ".join(result.heading_path),
        "context_label": _("扩展后上下文（分块 %(ids)s）") % {"ids": joined(f"#{i}" for i in result.context_chunk_ids)},
    }


def describe_trace(trace: RetrievalTrace) -> dict[str, Any]:
    return {
        "trace": trace,
        "mode": mode_label(trace.mode),
        "cache_epoch_label": str(CACHE_STAGES["epoch"]),
        "document_filter": document_filter_label(trace.document_filter),
        "fusion": fusion_label(trace.fusion) if trace.fusion else "",
        "empty_reason": empty_reason_label(trace.empty_reason) if trace.empty_reason else "",
        "degradations": [(degradation_label(code), code) for code in trace.degradations],
        "channel_errors": [
            (channel_label(error.channel), error.channel, error.error, error.message) for error in trace.channel_errors
        ],
        "stages": [(stage_label(t.stage), t.stage, t.elapsed_ms) for t in trace.stage_timings],
        "notes": [(note_label(note), note) for note in trace.notes],
        "counts": [(count_label(name), name, count) for name, count in trace.candidate_counts.items()],
        "hyde": hyde_label(trace.hyde.as_dict()) if trace.hyde else "",
        "dynamic_top_k": dynamic_top_k_label(trace.dynamic_top_k.as_dict()) if trace.dynamic_top_k else "",
        "cache_events": [
            (cache_event_label(e.stage, e.hit, e.source_type), cache_event_code(e.stage, e.hit, e.source_type), e.hit)
            for e in trace.cache.events
        ],
        "filters": filter_rows(trace.filters),
        "filters_summary": filters_summary(trace),
    }
