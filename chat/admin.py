"""Django admin for answering: question traces, conversations with their evidence.

Traces are an audit record: nobody may add, change or delete one here, and no admin action
touches them. Conversations may be deleted (privacy) but their messages are never edited.
Everything shown from a question, an answer or a citation is rendered as escaped text; an
answer's markdown is then rendered in the browser by `static/chat/admin_answer.js` (the chat
page's renderer and sanitizer, with no link followed). Codes are shown in words (`chat.labels`,
`retrieval.labels`, the enums' labels), each with its code as the tooltip.
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

from knowledge.admin.scope import KnowledgeScopedAdmin, KnowledgeScopedInline
from knowledge.locators import locator_label
from retrieval.labels import cache_event_code, cache_event_label, filter_label

from . import labels
from .contracts import HIT_TYPES, ROUTES, ConfidenceLevel, HitType, Intent, Route, VerificationStatus
from .models import Conversation, Message, MessageRole, QueryTrace
from .pipeline.citations import readable_markers

CONFIDENCE_COLOURS = {"high": "#15803d", "medium": "#b45309", "low": "#b91c1c"}
# The media of pages that show answers: the chat page's markdown renderer and sanitizer, and the
# script that renders each answer with them.
ANSWER_MEDIA_JS = ["vendor/marked/marked.umd.js", "vendor/dompurify/purify.min.js", "chat/answer_markdown.js", "chat/admin_answer.js"]

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


def confidence_badge(level: str, score: float | None = None):
    if level not in CONFIDENCE_COLOURS:
        return "—"
    label = ConfidenceLevel(level).label
    text = label if score is None else f"{label} {score:.2f}"
    return format_html(
        '<span class="chat-confidence" data-level="{}" style="background:{}">{}</span>',
        level, CONFIDENCE_COLOURS[level], text,
    )


def slow_trace_ms() -> float:
    return float(settings.RAG_SLOW_TRACE_MS)


# --- trace filters -----------------------------------------------------------------------------


class _LabelledValueFilter(admin.SimpleListFilter):
    """Exact match on a plain CharField, offering the enum's values with their labels."""

    field: str
    order: tuple[Route, ...] | tuple[HitType, ...]

    def lookups(self, request, model_admin):
        return [(member.value, member.label) for member in self.order]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(**{self.field: value}) if value in self.order else queryset


class RouteFilter(_LabelledValueFilter):
    title = gettext_lazy("路由")
    parameter_name = field = "route"
    order = ROUTES


class HitTypeFilter(_LabelledValueFilter):
    title = gettext_lazy("命中类型")
    parameter_name = field = "hit_type"
    order = HIT_TYPES


class ConfidenceFilter(admin.SimpleListFilter):
    title = gettext_lazy("置信度")
    parameter_name = "confidence_level"

    def lookups(self, request, model_admin):
        return [*((level.value, level.label) for level in ConfidenceLevel), ("none", _("未评估"))]

    def queryset(self, request, queryset):
        value = self.value()
        if value == "none":
            return queryset.filter(confidence_level="")
        return queryset.filter(confidence_level=value) if value in tuple(ConfidenceLevel) else queryset


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
        codes = [*labels.DEGRADATIONS, *sorted(seen - set(labels.DEGRADATIONS))]
        return [("any", _("有降级")), ("none", _("无降级")), *((code, labels.degradation_label(code)) for code in codes)]

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
            "label": labels.stage_label(str(timing["stage"])),
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
        locator = citation.get("locator")
        kind = str(citation.get("kind", ""))
        rows.append({
            "number": citation.get("number"),
            "kind": kind,
            "kind_label": labels.citation_kind_label(kind),
            "title": citation.get("title", ""),
            # Worded again in the reader's language: the stored label is in the asker's.
            "locator": (locator_label(locator) if isinstance(locator, dict) else "") or citation.get("locator_label") or "",
            "heading_path": " › ".join(citation.get("heading_path") or []),
            "score": citation.get("score"),
            "relevance": citation.get("relevance"),
            "cited": citation.get("cited", False),
            "supporting": supporting,
            "text": citation.get("text", ""),
            # A web source's page, shown as a link the reader opens (never fetched here).
            "url": _web_address(citation.get("url")) if kind == "web" else "",
            "site": str(citation.get("site") or "") if kind == "web" else "",
        })
    return rows


def _web_address(value: Any) -> str:
    """A stored web source's address when it is http(s): only those become links."""
    url = str(value or "")
    return url if url.lower().startswith(("http://", "https://")) else ""


def answer_block(text: str, citations: list[dict[str, Any]], *, element_id: str) -> str:
    """An answer as the admin shows it: plain text with "[来源 N]" markers, and its markdown (with
    the citation numbers and image ids it may show) for `chat/admin_answer.js` to render."""
    valid = [c for c in citations or [] if isinstance(c, dict)]
    return render_to_string("admin/chat/answer.html", {
        "element_id": element_id,
        "plain": readable_markers(text),
        "source": {
            "text": text,
            "citations": [c["number"] for c in valid if isinstance(c.get("number"), int)],
            "assets": [a["id"] for c in valid for a in c.get("assets") or [] if isinstance(a, dict) and isinstance(a.get("id"), int)],
            "asset_url": reverse("asset-bytes", args=[0]).removesuffix("0"),
        },
    })


def cache_event_rows(events: list[Any] | None) -> list[tuple[str, str, bool]]:
    """(words, code, hit) of each stored cache event."""
    rows = []
    for event in events or []:
        if not isinstance(event, dict):
            continue
        stage, hit, source = str(event.get("stage", "")), bool(event.get("hit")), str(event.get("source_type") or "")
        rows.append((cache_event_label(stage, hit, source), cache_event_code(stage, hit, source), hit))
    return rows


def _reason_rows(reasons: list[Any] | None) -> list[tuple[str, str]]:
    return [(str(code), labels.reason_label(str(code))) for code in reasons or []]


def confidence_breakdown(confidence: dict[str, Any] | None) -> dict[str, Any] | None:
    if not confidence:
        return None
    evidence = confidence.get("evidence_confidence") or {}
    generation = confidence.get("generation_verification") or {}
    status = str(generation.get("status", ""))
    return {
        "badge": confidence_badge(confidence.get("level", ""), confidence.get("score")),
        "reasons": _reason_rows(confidence.get("reasons")),
        "evidence": {"badge": confidence_badge(evidence.get("level", ""), evidence.get("score"))},
        "generation": {
            "score": generation.get("score"),
            "status": status,
            "status_label": VerificationStatus.label_of(status),
            "reasons": _reason_rows(generation.get("reasons")),
            "signals": labels.signal_rows(generation.get("signals")),
        },
        "signals": labels.signal_rows(confidence.get("signals")),
    }


def filter_words(documents: Any) -> list[tuple[str, str]]:
    """The metadata filters document retrieval applied, as the stored trace holds them: (words,
    JSON for the tooltip)."""
    filters = documents.get("filters") if isinstance(documents, dict) else None
    return [(filter_label(f), json.dumps(f, ensure_ascii=False)) for f in filters or [] if isinstance(f, dict)]


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
            "route_label", "intent_label", "hit_type_label", "confidence_label", "total_ms", "first_token_ms",
            "model_name", "insufficient_reason_label", "error_label", "error_class", "feedback_label",
        ]}),
    ]
    readonly_fields = [
        "knowledge_base_link", "conversation_link", "route_label", "intent_label", "hit_type_label",
        "confidence_label", "insufficient_reason_label", "error_label", "feedback_label",
    ]

    class Media:
        css = {"all": ["chat/admin.css"]}
        js = ANSWER_MEDIA_JS

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # an audit record: shown read-only

    def has_delete_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related(
            "knowledge_base", "conversation", "assistant_message__evidence", "assistant_message__feedback", "user"
        )

    @admin.display(description=gettext_lazy("读者评价"))
    def feedback_label(self, trace: QueryTrace):
        feedback = getattr(trace.assistant_message, "feedback", None) if trace.assistant_message_id else None
        if feedback is None:
            return "—"
        words = feedback.get_verdict_display() + (f"：{feedback.reason}" if feedback.reason else "")
        return format_html('<a href="{}" data-verdict="{}">{}</a>',
                           reverse("admin:chat_answerfeedback_change", args=[feedback.pk]), feedback.verdict, words)

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
        citations = evidence.citations if evidence else []
        heading = f"{trace.trace_id} · {Route.label_of(trace.route)}"
        return {
            "trace": trace,
            # The page's heading and breadcrumb: the stored route code in words.
            "subtitle": heading,
            "trace_heading": heading,
            "timing": timing_chart(trace),
            "confidence": confidence_breakdown(confidence),
            "answer": answer_block(message.content, citations, element_id="trace-answer-source") if message is not None else None,
            "answer_status": message.get_status_display() if message is not None else "",
            "citations": citation_rows(citations),
            "cache": cache,
            "cache_events": cache_event_rows(cache.get("events")),
            "degradations": [(code, labels.degradation_label(code)) for code in trace.degradations or []],
            "retrieval_steps": labels.retrieval_step_rows(details.get("documents")),
            "insufficient_reason": labels.insufficient_reason_label(trace.insufficient_reason) if trace.insufficient_reason else "",
            "error": labels.error_label(trace.error_code) if trace.error_code else "",
            "details_json": pretty_json(details),
            "filters": filter_words(details.get("documents")),
            "items": labels.item_confirmation_rows(details.get("items")),
        }

    @admin.display(description=gettext_lazy("问题"), ordering="question")
    def question_short(self, trace: QueryTrace) -> str:
        text = " ".join(trace.question.split())
        return text[:QUESTION_CHARS] + ("…" if len(text) > QUESTION_CHARS else "")

    @admin.display(description=gettext_lazy("路由"), ordering="route")
    def route_label(self, trace: QueryTrace) -> str:
        return Route.label_of(trace.route)

    @admin.display(description=gettext_lazy("意图"), ordering="intent")
    def intent_label(self, trace: QueryTrace) -> str:
        return Intent.label_of(trace.intent)

    @admin.display(description=gettext_lazy("命中类型"), ordering="hit_type")
    def hit_type_label(self, trace: QueryTrace) -> str:
        return HitType.label_of(trace.hit_type)

    @admin.display(description=gettext_lazy("信息不足原因"))
    def insufficient_reason_label(self, trace: QueryTrace):
        if not trace.insufficient_reason:
            return "—"
        return format_html('<span title="{}">{}</span>', trace.insufficient_reason,
                           labels.insufficient_reason_label(trace.insufficient_reason))

    @admin.display(description=gettext_lazy("错误"))
    def error_label(self, trace: QueryTrace):
        if not trace.error_code:
            return "—"
        return format_html('<span title="{}">{}</span>', trace.error_code, labels.error_label(trace.error_code))

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
            "、".join(labels.degradation_label(str(code)) for code in trace.degradations), _("是"),
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
        if message.role != MessageRole.ASSISTANT:
            return format_html('<div class="chat-text">{}</div>', message.content)
        evidence = getattr(message, "evidence", None)
        return answer_block(message.content, evidence.citations if evidence else [], element_id=f"answer-source-{message.pk}")

    @admin.display(description=gettext_lazy("回答证据"))
    def evidence_summary(self, message: Message):
        evidence = getattr(message, "evidence", None) if message.role == MessageRole.ASSISTANT else None
        if evidence is None:
            return "—"
        confidence = evidence.answer_confidence or {}
        return render_to_string("admin/chat/conversation/evidence.html", {
            "message": message,
            "evidence": evidence,
            "route": Route.label_of(evidence.route),
            "hit_type": HitType.label_of(evidence.hit_type),
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
        js = ANSWER_MEDIA_JS

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
