"""Django admin for answering: question traces, conversations with their evidence.

Traces are an audit record: nobody may add, change or delete one here, and no admin action
touches them. Conversations may be deleted (privacy) but their messages are never edited.
Everything shown from a question, an answer or a citation is rendered as escaped text.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db.models import Count, Q
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from knowledge.admin_scope import KnowledgeScopedAdmin, KnowledgeScopedInline

from .contracts import HIT_TYPES, ROUTES
from .models import Conversation, Message, MessageRole, QueryTrace

ROUTE_LABELS = {
    "direct_answer": gettext_lazy("直接回答"),
    "faq_exact": gettext_lazy("FAQ 精确匹配"),
    "retrieval": gettext_lazy("检索"),
}
HIT_TYPE_LABELS = {
    "direct_answer": gettext_lazy("直接回答"),
    "faq_exact": gettext_lazy("FAQ 精确命中"),
    "faq_direct": gettext_lazy("FAQ 直答"),
    "rag": gettext_lazy("文档问答"),
    "insufficient_context": gettext_lazy("信息不足"),
}
CONFIDENCE_LABELS = {"high": gettext_lazy("高"), "medium": gettext_lazy("中"), "low": gettext_lazy("低")}
CONFIDENCE_COLOURS = {"high": "#15803d", "medium": "#b45309", "low": "#b91c1c"}
STAGE_LABELS = {
    "route": gettext_lazy("查询路由"),
    "prepare": gettext_lazy("检索准备"),
    "faq_search": gettext_lazy("FAQ 检索"),
    "doc_search": gettext_lazy("文档检索"),
    "context_build": gettext_lazy("上下文构建"),
    "llm_generation": gettext_lazy("生成"),
    "citation_check": gettext_lazy("引用核验"),
    "save_history": gettext_lazy("保存"),
}
# Degradation codes written by retrieval and the pipeline; channel failures carry the query
# variant after a colon ("dense_failed:original"), so a code also matches "<code>:<anything>".
DEGRADATION_LABELS = {
    "history_rewrite_failed": gettext_lazy("追问改写失败"),
    "query_rewrite_failed": gettext_lazy("查询改写失败"),
    "faq_search_failed": gettext_lazy("FAQ 检索失败"),
    "dense_failed": gettext_lazy("向量检索通道失败"),
    "sparse_failed": gettext_lazy("关键词检索通道失败"),
    "hyde_failed": gettext_lazy("HyDE 失败"),
    "rerank_failed": gettext_lazy("重排失败"),
    "parent_expansion_failed": gettext_lazy("父块扩展失败"),
}
# `degradations` is a JSON list of distinct codes. JSON containment (`__contains`) is not
# supported on SQLite, so "which degradation" compares each list position instead (an index
# transform works on SQLite and PostgreSQL alike). Lists are deduplicated codes, far shorter.
MAX_DEGRADATION_POSITIONS = 32
# Building the filter's choices looks at this many recent degraded traces for unknown codes.
DEGRADATION_CHOICE_SAMPLE = 500
QUESTION_CHARS = 60


def degradation_q(code: str) -> Q:
    """Traces whose degradations include `code` or `code:<variant>`."""
    query = Q()
    for position in range(MAX_DEGRADATION_POSITIONS):
        query |= Q(**{f"degradations__{position}": code})
        query |= Q(**{f"degradations__{position}__startswith": f"{code}:"})
    return query


def degradation_label(code: str) -> str:
    base, _sep, variant = code.partition(":")
    label = str(DEGRADATION_LABELS.get(base, base))
    return f"{label}（{variant}）" if variant else label


def confidence_badge(level: str, score: float | None = None):
    if level not in CONFIDENCE_LABELS:
        return "—"
    text = str(CONFIDENCE_LABELS[level]) if score is None else f"{CONFIDENCE_LABELS[level]} {score:.2f}"
    return format_html(
        '<span class="chat-confidence" data-level="{}" style="background:{}">{}</span>',
        level, CONFIDENCE_COLOURS[level], text,
    )


def slow_trace_ms() -> float:
    return float(settings.RAG_SLOW_TRACE_MS)


# --- trace filters -----------------------------------------------------------------------------


class _LabelledValueFilter(admin.SimpleListFilter):
    """Exact match on a plain CharField, offering the known values with their Chinese labels."""

    field: str
    labels: dict[str, Any]
    order: tuple[str, ...]

    def lookups(self, request, model_admin):
        return [(value, self.labels[value]) for value in self.order]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(**{self.field: value}) if value in self.labels else queryset


class RouteFilter(_LabelledValueFilter):
    title = gettext_lazy("路由")
    parameter_name = field = "route"
    labels = ROUTE_LABELS
    order = ROUTES


class HitTypeFilter(_LabelledValueFilter):
    title = gettext_lazy("命中类型")
    parameter_name = field = "hit_type"
    labels = HIT_TYPE_LABELS
    order = HIT_TYPES


class ConfidenceFilter(admin.SimpleListFilter):
    title = gettext_lazy("置信度")
    parameter_name = "confidence_level"

    def lookups(self, request, model_admin):
        return [*CONFIDENCE_LABELS.items(), ("none", _("未评估"))]

    def queryset(self, request, queryset):
        value = self.value()
        if value == "none":
            return queryset.filter(confidence_level="")
        return queryset.filter(confidence_level=value) if value in CONFIDENCE_LABELS else queryset


class DegradationFilter(admin.SimpleListFilter):
    title = gettext_lazy("降级")
    parameter_name = "degradation"

    def lookups(self, request, model_admin):
        seen = {
            code.partition(":")[0]
            for codes in QueryTrace.objects.exclude(degradations=[])
            .values_list("degradations", flat=True)[:DEGRADATION_CHOICE_SAMPLE]
            for code in (codes or [])
            if isinstance(code, str)
        }
        codes = [*DEGRADATION_LABELS, *sorted(seen - set(DEGRADATION_LABELS))]
        return [("any", _("有降级")), ("none", _("无降级")), *((code, degradation_label(code)) for code in codes)]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        if value == "any":
            return queryset.exclude(degradations=[])
        if value == "none":
            return queryset.filter(degradations=[])
        return queryset.filter(degradation_q(value))


class SlowFilter(admin.SimpleListFilter):
    parameter_name = "slow"

    def __init__(self, request, params, model, model_admin):
        # The threshold is a setting: read it per request, not at import.
        self.title = _("慢请求（≥ %(ms)s 毫秒）") % {"ms": f"{slow_trace_ms():g}"}
        super().__init__(request, params, model, model_admin)

    def lookups(self, request, model_admin):
        return [("yes", _("慢请求")), ("no", _("正常"))]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(total_ms__gte=slow_trace_ms())
        if self.value() == "no":
            return queryset.filter(total_ms__lt=slow_trace_ms())
        return queryset


# --- trace detail ------------------------------------------------------------------------------


def timing_chart(trace: QueryTrace) -> dict[str, Any]:
    """Stage bars on one time axis: each stage starts where the ones before it ended.

    Stages run one after another; the moments between them (handing events to the client,
    bookkeeping) are not timed, so they show as the remainder up to the total.
    """
    stages = [t for t in trace.stage_timings or [] if isinstance(t, dict) and "stage" in t]
    elapsed = [max(float(t.get("elapsed_ms") or 0), 0.0) for t in stages]
    measured = sum(elapsed)
    scale = max(float(trace.total_ms or 0), measured, float(trace.first_token_ms or 0))
    if not stages or scale <= 0:
        return {"rows": [], "first_token": None}

    def percent(value: float) -> str:
        return f"{value / scale * 100:.2f}"

    rows, offset = [], 0.0
    for timing, ms in zip(stages, elapsed, strict=True):
        rows.append({
            "stage": timing["stage"],
            "label": STAGE_LABELS.get(timing["stage"], timing["stage"]),
            "elapsed_ms": f"{ms:g}",
            "left": percent(offset),
            "width": percent(ms),
        })
        offset += ms
    first = trace.first_token_ms
    return {
        "rows": rows,
        "scale_ms": f"{scale:g}",
        "unmeasured_ms": f"{max(scale - measured, 0):.2f}",
        "first_token": {"ms": f"{first:g}", "left": percent(first)} if first is not None else None,
    }


def citation_rows(citations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for citation in citations or []:
        if not isinstance(citation, dict):
            continue
        supporting = list(dict.fromkeys(
            span.get("text", "") for span in citation.get("spans") or [] if isinstance(span, dict) and span.get("text")
        ))
        rows.append({
            "number": citation.get("number"),
            "kind": citation.get("kind", ""),
            "title": citation.get("title", ""),
            "locator": citation.get("locator_label") or "",
            "heading_path": " › ".join(citation.get("heading_path") or []),
            "score": citation.get("score"),
            "relevance": citation.get("relevance"),
            "cited": citation.get("cited", False),
            "supporting": supporting,
            "text": citation.get("text", ""),
        })
    return rows


def confidence_breakdown(confidence: dict[str, Any] | None) -> dict[str, Any] | None:
    if not confidence:
        return None
    evidence = confidence.get("evidence_confidence") or {}
    generation = confidence.get("generation_verification") or {}
    return {
        "badge": confidence_badge(confidence.get("level", ""), confidence.get("score")),
        "reasons": confidence.get("reasons") or [],
        "evidence": {"badge": confidence_badge(evidence.get("level", ""), evidence.get("score"))},
        "generation": {
            "score": generation.get("score"),
            "status": generation.get("status", ""),
            "reasons": generation.get("reasons") or [],
            "signals": sorted((generation.get("signals") or {}).items()),
        },
        "signals": sorted((confidence.get("signals") or {}).items()),
    }


def pretty_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


@admin.register(QueryTrace)
class QueryTraceAdmin(KnowledgeScopedAdmin):
    change_form_template = "admin/chat/querytrace/change_form.html"
    list_display = [
        "created_at", "question_short", "knowledge_base", "route_label", "hit_type_label",
        "confidence_label", "total_ms", "first_token_ms", "status", "degraded",
    ]
    list_filter = [
        "knowledge_base", RouteFilter, HitTypeFilter, ConfidenceFilter, "status", DegradationFilter, SlowFilter,
    ]
    list_select_related = ["knowledge_base"]
    search_fields = ["question", "trace_id"]
    date_hierarchy = "created_at"
    actions = None
    fieldsets = [
        (None, {"fields": [
            "trace_id", "created_at", "status", "knowledge_base_link", "kb_version", "conversation_link",
            "user", "question", "rewritten_query",
        ]}),
        (gettext_lazy("回答"), {"fields": [
            "route_label", "intent", "hit_type_label", "confidence_label", "total_ms", "first_token_ms",
            "model_name", "insufficient_reason", "error_class", "error_code",
        ]}),
    ]
    readonly_fields = [
        "knowledge_base_link", "conversation_link", "route_label", "hit_type_label", "confidence_label",
    ]

    class Media:
        css = {"all": ["chat/admin.css"]}

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # an audit record: shown read-only

    def has_delete_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related(
            "knowledge_base", "conversation", "assistant_message__evidence", "user"
        )

    def change_view(self, request, object_id, form_url="", extra_context=None):
        trace = self.get_object(request, object_id)
        if trace is not None:
            extra_context = {**(extra_context or {}), **self._detail_context(trace)}
        return super().change_view(request, object_id, form_url, extra_context)

    def _detail_context(self, trace: QueryTrace) -> dict[str, Any]:
        message = trace.assistant_message
        evidence = getattr(message, "evidence", None) if message is not None else None
        details = trace.full_details if isinstance(trace.full_details, dict) else {}
        confidence = evidence.answer_confidence if evidence else details.get("answer_confidence")
        cache = trace.cache if isinstance(trace.cache, dict) else {}
        return {
            "trace": trace,
            "timing": timing_chart(trace),
            "confidence": confidence_breakdown(confidence),
            "answer": message.content if message is not None else None,
            "answer_status": message.get_status_display() if message is not None else "",
            "citations": citation_rows(evidence.citations if evidence else []),
            "cache": cache,
            "cache_events": [e for e in cache.get("events") or [] if isinstance(e, dict)],
            "degradations": [(code, degradation_label(code)) for code in trace.degradations or []],
            "details_json": pretty_json(details),
        }

    @admin.display(description=gettext_lazy("问题"), ordering="question")
    def question_short(self, trace: QueryTrace) -> str:
        text = " ".join(trace.question.split())
        return text[:QUESTION_CHARS] + ("…" if len(text) > QUESTION_CHARS else "")

    @admin.display(description=gettext_lazy("路由"), ordering="route")
    def route_label(self, trace: QueryTrace) -> str:
        return str(ROUTE_LABELS.get(trace.route, trace.route or "—"))

    @admin.display(description=gettext_lazy("命中类型"), ordering="hit_type")
    def hit_type_label(self, trace: QueryTrace) -> str:
        return str(HIT_TYPE_LABELS.get(trace.hit_type, trace.hit_type or "—"))

    @admin.display(description=gettext_lazy("置信度"), ordering="confidence_score")
    def confidence_label(self, trace: QueryTrace):
        return confidence_badge(trace.confidence_level, trace.confidence_score)

    @admin.display(description=gettext_lazy("降级"))
    def degraded(self, trace: QueryTrace):
        # Not the boolean icon: its green tick would read "good" for a degraded answer.
        if not trace.degradations:
            return format_html('<span data-degraded="no">{}</span>', _("否"))
        return format_html(
            '<span class="chat-tag chat-tag-bad" data-degraded="yes" title="{}">{}</span>',
            "、".join(degradation_label(str(code)) for code in trace.degradations), _("是"),
        )

    @admin.display(description=gettext_lazy("知识库"))
    def knowledge_base_link(self, trace: QueryTrace):
        return format_html(
            '<a id="trace-kb-link" href="{}">{}</a>',
            reverse("admin:knowledge_knowledgebase_change", args=[trace.knowledge_base_id]), trace.knowledge_base.name,
        )

    @admin.display(description=gettext_lazy("会话"))
    def conversation_link(self, trace: QueryTrace):
        if trace.conversation_id is None:
            return _("（会话已删除）")
        return format_html(
            '<a id="trace-conversation-link" href="{}">{}</a>',
            reverse("admin:chat_conversation_change", args=[trace.conversation_id]), trace.conversation.title,
        )


# --- conversations -----------------------------------------------------------------------------


class MessageInline(KnowledgeScopedInline, admin.TabularInline):
    model = Message
    extra = 0
    can_delete = False
    fields = ["role", "status", "content_text", "created_at", "evidence_summary", "trace_link"]
    readonly_fields = fields
    verbose_name_plural = gettext_lazy("消息")

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # what was said and answered is kept as it was

    def has_delete_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("evidence", "trace")

    @admin.display(description=gettext_lazy("内容"))
    def content_text(self, message: Message):
        return format_html('<div class="chat-text">{}</div>', message.content)

    @admin.display(description=gettext_lazy("回答证据"))
    def evidence_summary(self, message: Message):
        evidence = getattr(message, "evidence", None) if message.role == MessageRole.ASSISTANT else None
        if evidence is None:
            return "—"
        confidence = evidence.answer_confidence or {}
        return render_to_string("admin/chat/conversation/evidence.html", {
            "message": message,
            "evidence": evidence,
            "route": ROUTE_LABELS.get(evidence.route, evidence.route),
            "hit_type": HIT_TYPE_LABELS.get(evidence.hit_type, evidence.hit_type),
            "confidence": confidence_badge(confidence.get("level", ""), confidence.get("score")),
            "citations": citation_rows(evidence.citations),
        })

    @admin.display(description=gettext_lazy("追踪"))
    def trace_link(self, message: Message):
        trace = getattr(message, "trace", None)
        if trace is None:
            return "—"
        return format_html(
            '<a class="message-trace-link" href="{}">{}</a>',
            reverse("admin:chat_querytrace_change", args=[trace.pk]), _("查看追踪"),
        )


@admin.register(Conversation)
class ConversationAdmin(KnowledgeScopedAdmin):
    list_display = ["title", "knowledge_base", "owner", "message_total", "updated_at"]
    list_filter = ["knowledge_base"]
    search_fields = ["title"]
    list_select_related = ["knowledge_base", "user"]
    fields = ["title", "knowledge_base", "owner", "client_id", "created_at", "updated_at", "traces_link"]
    readonly_fields = fields
    inlines = [MessageInline]

    class Media:
        css = {"all": ["chat/admin.css"]}

    def has_add_permission(self, request):
        return False  # conversations start from a question

    def has_change_permission(self, request, obj=None):
        return False  # staff may read and delete (privacy), never rewrite

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_messages=Count("messages"))

    @admin.display(description=gettext_lazy("所有者"), ordering="user__username")
    def owner(self, conversation: Conversation) -> str:
        return conversation.user.get_username() if conversation.user_id else _("匿名会话")

    @admin.display(description=gettext_lazy("消息数"), ordering="_messages")
    def message_total(self, conversation: Conversation) -> int:
        return conversation._messages

    @admin.display(description=gettext_lazy("追踪"))
    def traces_link(self, conversation: Conversation):
        return format_html(
            '<a id="conversation-traces-link" href="{}?conversation__exact={}">{}</a>',
            reverse("admin:chat_querytrace_changelist"), conversation.pk, _("查看本会话的问答追踪"),
        )
