"""Evaluation sets (import, cases) and runs (metrics, per-question rows) in the admin."""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from chat.pipeline.citations import readable_markers
from chat.contracts import ConfidenceLevel, HitType, Route
from chat.models import AnswerFeedback
from knowledge.access import Role, knowledge_bases_with_role
from knowledge.admin.display import quiet_code
from knowledge.admin.scope import KnowledgeScopedAdmin, KnowledgeScopedInline
from knowledge.forms import embedding_model_label, embedding_model_name
from ragsite.errors import DomainError
from retrieval.labels import filter_label, joined, mode_label, stage_label

from .admin_feedback import AnswerFeedbackAdmin
from .charts import Point, bar_chart, scatter_chart
from .forms import ImportEvalSetForm
from .importers import read_native_file, read_shared_uploads
from .models import EvalCase, EvalCaseResult, EvalRun, EvalSet, RunKind
from .release import PURPOSE as RELEASE_CHECK_PURPOSE
from .demo import DEMO_SOURCES
from .metric_names import metric_meaning, metric_name
from .selectors import compare_runs, numeric_metrics
from .services import import_eval_set

METRIC_ORDER = ("recall", "hit", "mrr", "ndcg")
ADMIN_CSS = {"all": ["knowledge/admin.css"]}

# The metrics a run list shows for each kind of run.
KEY_METRICS = {
    RunKind.RETRIEVAL: ("recall", "hit", "mrr", "ndcg"),
    RunKind.ANSWERS: ("containment", "citation_validity", "answerable_declined", "insufficient_context_rate"),
}
# The parameters of a run (`EvalRun.config`), in words.
CONFIG_NAMES = {
    "mode": gettext_lazy("检索方式"),
    "k": gettext_lazy("评估前几个结果（k）"),
    "top_k": gettext_lazy("每题取回结果数"),
    "candidate_k": gettext_lazy("每路候选数"),
    "fusion": gettext_lazy("融合方式"),
    "rewrite": gettext_lazy("问题改写"),
    "rerank": gettext_lazy("重排"),
    "parent_expansion": gettext_lazy("父块扩展"),
    "hyde": gettext_lazy("假设答案检索"),
    "dynamic_top_k": gettext_lazy("动态返回条数"),
    "purpose": gettext_lazy("用途"),
    "version_id": gettext_lazy("版本 ID"),
    "limit": gettext_lazy("最多评测题数"),
    "filters": gettext_lazy("元数据筛选"),
}
FUSIONS = {"convex": gettext_lazy("加权融合"), "rrf": gettext_lazy("倒数排名融合")}
# A run's configuration as `evaluation.runner.run_label` writes it: the mode, the fusion in
# brackets, then each option switched on ("hybrid(convex)+rerank").
RUN_LABEL = re.compile(r"(?P<mode>dense|sparse|hybrid)(?:\((?P<fusion>[a-z]+)\))?(?P<options>(?:\+(?:rewrite|rerank|parents|hyde|dynamic))*)")
RUN_OPTIONS = {"rewrite": gettext_lazy("问题改写"), "rerank": gettext_lazy("重排"), "parents": gettext_lazy("父块扩展"),
               "hyde": gettext_lazy("假设答案检索"), "dynamic": gettext_lazy("动态返回条数")}
# The label `evaluation.answers` gives a run of the whole answering pipeline.
ANSWERS_LABEL = "rag"
# The model services a run may have used (`settings.RAG_PROVIDER`).
PROVIDERS = {"local": gettext_lazy("本地模型"), "dashscope": gettext_lazy("阿里云百炼"), "openai": gettext_lazy("OpenAI 兼容服务")}
# Model calls a run counts (`evaluation.runner.Usage`).
CALL_KINDS = {
    "embedding": gettext_lazy("问题向量化"),
    "rewrite": gettext_lazy("问题改写"),
    "hyde": gettext_lazy("假设答案生成"),
    "rerank": gettext_lazy("重排"),
}
# How a question fared from run A to run B (`CaseRow.change` of a comparison).
CASE_CHANGES = {
    "lost": gettext_lazy("B 丢失"), "gained": gettext_lazy("B 新找到"), "better": gettext_lazy("B 更靠前"),
    "worse": gettext_lazy("B 更靠后"), "same": gettext_lazy("不变"), "only_a": gettext_lazy("只在 A 中"),
    "only_b": gettext_lazy("只在 B 中"),
}


def metric_label(name: str) -> SafeString:
    """The metric in words, with its code (what reports and the command line use) as the tooltip."""
    return quiet_code(metric_name(name), name)


def run_label_words(label: str) -> str:
    """"hybrid(convex)+rerank" → "混合检索（语义 + 关键词）· 加权融合 + 重排"; another label stays."""
    if label == ANSWERS_LABEL:
        return _("完整问答流程")
    parsed = RUN_LABEL.fullmatch(label)
    if parsed is None:
        return label
    parts = [mode_label(parsed["mode"])]
    if parsed["fusion"]:
        parts.append(str(FUSIONS.get(parsed["fusion"], parsed["fusion"])))
    words = " · ".join(parts)
    options = [str(RUN_OPTIONS[option]) for option in parsed["options"].split("+") if option]
    return " + ".join([words, *options])


def config_value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return _("是") if value else _("否")
    if value is None or value == "":
        return _("默认（部署设置）") if name == "fusion" else "—"
    if name == "mode":
        return mode_label(str(value))
    if name == "fusion":
        return str(FUSIONS.get(str(value), value))
    if name == "purpose":
        return _("发布前的上线检查") if value == RELEASE_CHECK_PURPOSE else str(value)
    if name == "filters" and isinstance(value, list):
        return joined(filter_label(f) for f in value if isinstance(f, dict)) or "—"
    return str(value)


def source_label(source: str) -> SafeString | str:
    """Where a set's questions came from, as `import_eval_set` records it."""
    if not source:
        return "—"
    if source in DEMO_SOURCES:
        return quiet_code(_("演示知识库内置评测集"), source)
    name = PurePath(source).name
    if PurePath(source).suffix.lower() in (".csv", ".jsonl", ".xlsx"):
        return quiet_code(_("导入的文件 %(name)s") % {"name": name}, source if source != name else "")
    return quiet_code(_("共享评测集目录 %(name)s") % {"name": name}, source if source != name else "")


class LinesField(forms.CharField):
    """A JSON list edited as lines of text, one value a line (numbers when `numbers`)."""

    widget = forms.Textarea(attrs={"rows": 2})

    def __init__(self, *, numbers: bool = False, **kwargs: Any) -> None:
        self.numbers = numbers
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return "\n".join(str(item) for item in value)
        return value

    def to_python(self, value: Any) -> list:
        if isinstance(value, (list, tuple)):
            return list(value)
        lines = [line.strip() for line in str(value or "").splitlines() if line.strip()]
        if not self.numbers:
            return lines
        if not all(line.isdigit() for line in lines):
            raise ValidationError(_("请每行填写一个分块编号（数字）。"), code="invalid")
        return [int(line) for line in lines]


class EvalCaseForm(forms.ModelForm):
    expected_documents = LinesField(label=gettext_lazy("期望文档"), help_text=gettext_lazy("每行一个：标题、文件名或外部 ID。"))
    expected_chunks = LinesField(label=gettext_lazy("期望分块"), numbers=True, help_text=gettext_lazy("每行一个分块编号。"))
    answers = LinesField(label=gettext_lazy("参考答案"), help_text=gettext_lazy("每行一个要点，回答包含任一要点即算答对。"))

    class Meta:
        model = EvalCase
        fields = ["key", "question", "expected_documents", "expected_chunks", "answers", "answerable"]
        widgets = {"question": forms.Textarea(attrs={"rows": 2}), "key": forms.TextInput(attrs={"size": 8})}


class EvalCaseInline(KnowledgeScopedInline, admin.TabularInline):
    model = EvalCase
    form = EvalCaseForm
    extra = 0
    fields = ["key", "question", "expected_documents", "expected_chunks", "answers", "answerable"]
    show_change_link = False


@admin.register(EvalSet)
class EvalSetAdmin(KnowledgeScopedAdmin):
    change_list_template = "admin/evaluation/evalset/change_list.html"
    list_display = ["name", "knowledge_base", "is_default", "case_count", "unanswerable_count", "run_count", "updated_at"]
    list_filter = ["knowledge_base", "is_default"]
    search_fields = ["name", "description"]
    readonly_fields = ["source_words", "created_by", "created_at", "updated_at"]
    fields = ["name", "description", "knowledge_base", "is_default", "source_words", "created_by", "created_at", "updated_at"]
    inlines = [EvalCaseInline]

    class Media:
        css = ADMIN_CSS

    @admin.display(description=gettext_lazy("来源"))
    def source_words(self, eval_set: EvalSet) -> SafeString | str:
        return source_label(eval_set.source)

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("knowledge_base").annotate(
            _cases=Count("cases", distinct=True), _runs=Count("runs", distinct=True),
            _unanswerable=Count("cases", filter=Q(cases__answerable=False), distinct=True),
        )

    @admin.display(description=gettext_lazy("问题数"), ordering="_cases")
    def case_count(self, eval_set: EvalSet) -> int:
        return eval_set._cases

    @admin.display(description=gettext_lazy("不可回答"), ordering="_unanswerable")
    def unanswerable_count(self, eval_set: EvalSet) -> int:
        return eval_set._unanswerable

    @admin.display(description=gettext_lazy("运行次数"), ordering="_runs")
    def run_count(self, eval_set: EvalSet):
        url = reverse("admin:evaluation_evalrun_changelist") + f"?eval_set__id__exact={eval_set.pk}"
        return format_html('<a href="{}">{}</a>', url, eval_set._runs)

    def get_urls(self):
        return [
            path("import/", self.admin_site.admin_view(self.import_view), name="evaluation_evalset_import"),
        ] + super().get_urls()

    def import_view(self, request):
        if not self.has_add_permission(request):
            return HttpResponseRedirect(reverse("admin:evaluation_evalset_changelist"))
        form = ImportEvalSetForm(
            request.POST or None, request.FILES or None,
            knowledge_bases=knowledge_bases_with_role(request.user, Role.EDITOR),
            require_knowledge_base=not request.user.is_superuser,
        )
        # Names are per knowledge base and the form offers only those the user edits (superusers:
        # any, or none), so an existing name is always a set the user may replace.
        if request.method == "POST" and form.is_valid():
            upload, qrels = form.cleaned_data["file"], form.cleaned_data["qrels"]
            try:
                # One byte past the limit is enough for the intake check to refuse a larger file.
                limit = settings.RAG_MAX_IMPORT_BYTES + 1
                cases = (read_shared_uploads(queries=upload.read(limit), qrels=qrels.read(limit)) if qrels
                         else read_native_file(upload.name, upload.read(limit)))
                outcome = import_eval_set(
                    name=form.cleaned_data["name"], cases=cases,
                    source=upload.name, knowledge_base=form.cleaned_data["knowledge_base"],
                    default=form.cleaned_data["default"], actor=request.user,
                )
            except DomainError as error:
                form.add_error(None, str(error.message))
            else:
                messages.success(request, _(
                    "评测集「%(name)s」已导入：新增 %(created)d，更新 %(updated)d，删除 %(removed)d，未变 %(unchanged)d。"
                ) % {"name": outcome.eval_set.name, "created": outcome.created, "updated": outcome.updated,
                     "removed": outcome.removed, "unchanged": outcome.unchanged})
                return HttpResponseRedirect(reverse("admin:evaluation_evalset_change", args=[outcome.eval_set.pk]))
        return TemplateResponse(request, "admin/knowledge/form_page.html", {
            **self.admin_site.each_context(request), "title": _("导入评测集"), "form": form, "opts": self.model._meta,
            "form_id": "import-form", "submit_label": _("导入"),
        })


def metric_cells(metrics: dict) -> list[tuple[str, str]]:
    """(name, value) in a stable order: recall@k, hit@k, mrr@10, ndcg@10, then the rest."""
    def order(name: str) -> tuple[int, str]:
        prefix = name.split("@")[0]
        return (METRIC_ORDER.index(prefix) if prefix in METRIC_ORDER else len(METRIC_ORDER), name)

    # Distributions and the calibration table have tables of their own.
    return [(name, f"{value:.4f}" if isinstance(value, float) else str(value))
            for name, value in sorted(metrics.items(), key=lambda item: order(item[0]))
            if isinstance(value, (int, float))]


def key_metric_cells(run: EvalRun) -> list[tuple[str, str]]:
    """The few metrics that say how a run went, for the run list."""
    wanted = KEY_METRICS.get(run.kind, METRIC_ORDER)
    cells = [(name, value) for name, value in metric_cells(run.metrics) if name.partition("@")[0] in wanted]
    return sorted(cells, key=lambda cell: wanted.index(cell[0].partition("@")[0]))


@admin.register(EvalRun)
class EvalRunAdmin(KnowledgeScopedAdmin):
    # What tells runs apart at a glance; the knowledge base (a filter) and the code version (searchable,
    # and on the run and comparison pages) make the list too wide for a 1,440 px window.
    list_display = ["id", "eval_set", "label_words", "kind", "version_label", "key_metrics", "p50", "status",
                    "embedding_model_short", "started_at"]
    list_filter = ["eval_set", "kind", "status", "knowledge_base"]
    search_fields = ["label", "git_revision"]
    readonly_fields = ["eval_set", "kind", "label_words", "knowledge_base", "version_label", "status", "error", "config_table",
                       "metric_table", "distribution_table", "calibration_table", "latency_table", "usage_table", "case_count",
                       "provider_words", "embedding_model_words", "git_revision", "created_by", "started_at", "finished_at", "case_rows"]
    fields = readonly_fields

    actions = ["compare", "charts"]

    class Media:
        css = ADMIN_CSS

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("eval_set", "knowledge_base")

    def get_urls(self):
        return [
            path("compare/<int:a>/<int:b>/", self.admin_site.admin_view(self.compare_view), name="evaluation_evalrun_compare"),
            path("charts/", self.admin_site.admin_view(self.charts_view), name="evaluation_evalrun_charts"),
        ] + super().get_urls()

    @admin.action(description=gettext_lazy("对比所选的两次运行"))
    def compare(self, request, queryset):
        runs = list(queryset.order_by("started_at", "id")[:3])
        if len(runs) != 2:
            messages.error(request, _("请恰好选择两次运行进行对比。"))
            return None
        return HttpResponseRedirect(reverse("admin:evaluation_evalrun_compare", args=[runs[0].pk, runs[1].pk]))

    @admin.action(description=gettext_lazy("图表：所选运行"))
    def charts(self, request, queryset):
        ids = ",".join(str(pk) for pk in queryset.order_by("started_at", "id").values_list("pk", flat=True)[:12])
        return HttpResponseRedirect(reverse("admin:evaluation_evalrun_charts") + f"?ids={ids}")

    def compare_view(self, request, a: int, b: int):
        runs = {run.pk: run for run in self.get_queryset(request).filter(pk__in=[a, b])}
        if a not in runs or b not in runs or not self.has_view_permission(request):
            return HttpResponseRedirect(reverse("admin:evaluation_evalrun_changelist"))
        comparison = compare_runs(runs[a], runs[b])
        return TemplateResponse(request, "admin/evaluation/evalrun/compare.html", {
            **self.admin_site.each_context(request), "title": _("对比评测运行"), "opts": self.model._meta,
            "comparison": comparison, "lost": comparison.count("lost"), "gained": comparison.count("gained"),
            "models": (embedding_model_name(runs[a].embedding_model) or "—", embedding_model_name(runs[b].embedding_model) or "—"),
            "labels": (run_label_words(runs[a].label), run_label_words(runs[b].label)),
            "metric_rows": [(metric_label(row.name), row) for row in comparison.metrics],
            "case_rows": [(row, CASE_CHANGES.get(row.change, row.change)) for row in comparison.cases],
        })

    def charts_view(self, request):
        wanted = [int(part) for part in request.GET.get("ids", "").split(",") if part.isdigit()][:12]
        runs = list(self.get_queryset(request).filter(pk__in=wanted).order_by("started_at", "id"))
        if not runs or not self.has_view_permission(request):
            return HttpResponseRedirect(reverse("admin:evaluation_evalrun_changelist"))
        metrics = {run.pk: numeric_metrics(run) for run in runs}
        # Rates only (floats in [0, 1]); counts such as "answerable" are not charted.
        names = sorted({name for values in metrics.values() for name, value in values.items()
                        if isinstance(value, float) and 0.0 <= value <= 1.0})
        bars = [bar_chart(metric_name(name), [Point(f"#{run.pk} {run_label_words(run.label)}", metrics[run.pk].get(name, 0.0))
                                              for run in runs])
                for name in names]
        quality = "ndcg@10" if "ndcg@10" in names else (names[0] if names else "")
        scatter = scatter_chart(
            _("延迟中位数与%(metric)s") % {"metric": metric_name(quality)},
            [Point(f"#{run.pk} {run_label_words(run.label)}", metrics[run.pk].get(quality, 0.0),
                   x=float((run.latency_ms or {}).get("p50") or 0.0)) for run in runs],
            x_label=_("延迟中位数（毫秒）"), y_label=metric_name(quality),
        ) if quality else ""
        return TemplateResponse(request, "admin/evaluation/evalrun/charts.html", {
            **self.admin_site.each_context(request), "title": _("评测运行图表"), "opts": self.model._meta,
            "bars": bars, "scatter": scatter,
        })

    def has_add_permission(self, request):
        return False  # runs come from evaluate_retrieval / evaluate_answers and the release check

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # The page is titled with the run's configuration in words, not its label's code.
        run = self.get_object(request, object_id)
        if run is not None:
            extra_context = {**(extra_context or {}),
                             "subtitle": f"#{run.pk} {run.eval_set} {run_label_words(run.label)}"}
        return super().change_view(request, object_id, form_url, extra_context)

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description=gettext_lazy("主要指标"))
    def key_metrics(self, run: EvalRun) -> SafeString | str:
        cells = key_metric_cells(run)
        if not cells:
            return "—"
        return format_html_join("", '<div title="{}"><span class="rag-nowrap">{}</span> {}</div>',
                                ((name, metric_name(name), value) for name, value in cells))

    @admin.display(description=gettext_lazy("配置"), ordering="label")
    def label_words(self, run: EvalRun) -> SafeString:
        return quiet_code(run_label_words(run.label), run.label)

    @admin.display(description=gettext_lazy("模型服务"))
    def provider_words(self, run: EvalRun) -> SafeString:
        return quiet_code(str(PROVIDERS.get(run.provider, run.provider or "—")), run.provider)

    @admin.display(description=gettext_lazy("延迟中位数（毫秒）"))
    def p50(self, run: EvalRun) -> str:
        value = (run.latency_ms or {}).get("p50")
        return f"{value:.1f}" if isinstance(value, (int, float)) else "—"

    @admin.display(description=gettext_lazy("版本"), ordering="version_number")
    def version_label(self, run: EvalRun) -> str:
        return f"v{run.version_number}" if run.version_number else "—"

    @admin.display(description=gettext_lazy("向量模型"), ordering="embedding_model")
    def embedding_model_short(self, run: EvalRun) -> str:
        return embedding_model_name(run.embedding_model) or "—"

    @admin.display(description=gettext_lazy("向量模型"))
    def embedding_model_words(self, run: EvalRun) -> SafeString:
        return quiet_code(embedding_model_label(run.embedding_model), run.embedding_model)

    @admin.display(description=gettext_lazy("运行参数"))
    def config_table(self, run: EvalRun) -> SafeString:
        order = list(CONFIG_NAMES)
        names = sorted(run.config, key=lambda name: (order.index(name) if name in order else len(order), name))
        return _table([_("参数"), _("值")], [
            (quiet_code(str(CONFIG_NAMES.get(name, name)), name), config_value(name, run.config[name])) for name in names
        ])

    @admin.display(description=gettext_lazy("指标"))
    def metric_table(self, run: EvalRun) -> SafeString:
        return _table([_("指标"), _("值"), _("含义")],
                      [(metric_label(name), value, metric_meaning(name)) for name, value in metric_cells(run.metrics)])

    @admin.display(description=gettext_lazy("路由与命中类型"))
    def distribution_table(self, run: EvalRun) -> SafeString | str:
        metrics = run.metrics or {}
        rows = [(_("路由"), quiet_code(Route.label_of(name), name), count)
                for name, count in sorted((metrics.get("routes") or {}).items())]
        rows += [(_("命中类型"), quiet_code(HitType.label_of(name), name), count)
                 for name, count in sorted((metrics.get("hit_types") or {}).items())]
        return _table([_("分布"), _("取值"), _("次数")], rows) if rows else "—"

    @admin.display(description=gettext_lazy("置信度校准"))
    def calibration_table(self, run: EvalRun) -> SafeString | str:
        rows = [(confidence_label(str(row["level"])), row["count"], row["answerable"], f"{row['accuracy']:.2%}")
                for row in (run.metrics or {}).get("calibration") or []]
        return _table([_("置信度"), _("问题数"), _("可回答"), _("正确率")], rows) if rows else "—"

    @admin.display(description=gettext_lazy("延迟（毫秒）"))
    def latency_table(self, run: EvalRun) -> SafeString:
        latency = run.latency_ms or {}
        rows = [(_("整题"), latency.get("p50", "—"), latency.get("p95", "—"))]
        rows += [(quiet_code(stage_label(stage), stage), v.get("p50", "—"), v.get("p95", "—"))
                 for stage, v in (latency.get("stages") or {}).items()]
        return _table([_("阶段"), _("中位数"), _("95% 的问题不超过")], rows)

    @admin.display(description=gettext_lazy("模型调用与费用（每 1,000 个问题）"))
    def usage_table(self, run: EvalRun) -> SafeString:
        usage = run.usage or {}
        calls, tokens = usage.get("calls_per_1000") or {}, usage.get("tokens_per_1000") or {}
        rows = [(quiet_code(str(CALL_KINDS.get(kind, kind)), kind), calls[kind], tokens.get(kind, 0)) for kind in sorted(calls)]
        rows.append((_("估算费用"), "", usage.get("cost_per_1000", 0)))
        return _table([_("调用"), _("次数"), _("词元数")], rows)

    @admin.display(description=gettext_lazy("逐题结果"))
    def case_rows(self, run: EvalRun):
        results = EvalCaseResult.objects.filter(run=run).order_by("id")[:500]
        rows = [
            (
                result.case_key, result.question,
                "、".join(result.gold) or "—",
                "；".join(f"{item['rank']}. {item.get('title') or item['key']}" for item in result.retrieved[:5]) or "—",
                result.gold_rank or _("未找到"),
                readable_markers(result.answer)[:200] or "—",
            )
            for result in results
        ]
        return _table([_("编号"), _("问题"), _("期望"), _("检索结果（前 5）"), _("期望文档名次"), _("回答")], rows,
                      css_class="rag-case-results")


def confidence_label(level: str) -> str:
    """A calibration row's level: a confidence level, or the declined answers kept apart."""
    if level == "declined":
        return _("拒答（回答“找不到”）")
    if level == "none":
        return _("未评置信度")
    return ConfidenceLevel.label_of(level)


def _table(headers, rows, *, css_class: str = ""):
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join(
        "", "<tr>{}</tr>",
        ((format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows),
    )
    return format_html('<table class="{}"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', css_class, head, body)


# The readers' feedback, with the page that turns a 👎 into a question of the default set.
admin.site.register(AnswerFeedback, AnswerFeedbackAdmin)
