"""Evaluation sets (import, cases) and runs (metrics, per-question rows) in the admin."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import Count, Q
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from knowledge.access import Role, knowledge_bases_with_role
from knowledge.admin_scope import KnowledgeScopedAdmin, KnowledgeScopedInline
from knowledge.models import KnowledgeBase
from ragsite.errors import DomainError

from .charts import Point, bar_chart, scatter_chart
from .forms import ImportEvalSetForm
from .importers import read_native_file, read_shared_uploads
from .models import EvalCase, EvalCaseResult, EvalRun, EvalSet
from .selectors import compare_runs, numeric_metrics
from .services import import_eval_set

METRIC_ORDER = ("recall", "hit", "mrr", "ndcg")


class EvalCaseInline(KnowledgeScopedInline, admin.TabularInline):
    model = EvalCase
    extra = 0
    fields = ["key", "question", "expected_documents", "expected_chunks", "answers", "answerable"]
    show_change_link = False


@admin.register(EvalSet)
class EvalSetAdmin(KnowledgeScopedAdmin):
    change_list_template = "admin/evaluation/evalset/change_list.html"
    list_display = ["name", "knowledge_base", "is_default", "case_count", "unanswerable_count", "run_count", "updated_at"]
    list_filter = ["knowledge_base", "is_default"]
    search_fields = ["name", "description"]
    readonly_fields = ["source", "created_by", "created_at", "updated_at"]
    fields = ["name", "description", "knowledge_base", "is_default", "source", "created_by", "created_at", "updated_at"]
    inlines = [EvalCaseInline]

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
                cases = (read_shared_uploads(queries=upload.read(), qrels=qrels.read()) if qrels
                         else read_native_file(upload.name, upload.read()))
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


@admin.register(EvalRun)
class EvalRunAdmin(KnowledgeScopedAdmin):
    list_display = ["id", "eval_set", "label", "kind", "knowledge_base", "version_number", "key_metrics", "p50", "status",
                    "embedding_model", "git_revision", "started_at"]
    list_filter = ["eval_set", "kind", "status", "knowledge_base"]
    search_fields = ["label", "git_revision"]
    readonly_fields = ["eval_set", "kind", "label", "knowledge_base", "version_number", "status", "error", "config_table",
                       "metric_table", "distribution_table", "calibration_table", "latency_table", "usage_table", "case_count", "provider", "embedding_model", "git_revision",
                       "created_by", "started_at", "finished_at", "case_rows"]
    fields = readonly_fields

    actions = ["compare", "charts"]

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
        bars = [bar_chart(name, [Point(f"#{run.pk} {run.label}", metrics[run.pk].get(name, 0.0)) for run in runs])
                for name in names]
        quality = "ndcg@10" if "ndcg@10" in names else (names[0] if names else "")
        scatter = scatter_chart(
            _("延迟 p50 与 %(metric)s") % {"metric": quality},
            [Point(f"#{run.pk} {run.label}", metrics[run.pk].get(quality, 0.0),
                   x=float((run.latency_ms or {}).get("p50") or 0.0)) for run in runs],
            x_label=_("延迟 p50 (ms)"), y_label=quality,
        ) if quality else ""
        return TemplateResponse(request, "admin/evaluation/evalrun/charts.html", {
            **self.admin_site.each_context(request), "title": _("评测运行图表"), "opts": self.model._meta,
            "bars": bars, "scatter": scatter,
        })

    def has_add_permission(self, request):
        return False  # runs come from evaluate_retrieval / evaluate_answers and the release check

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description=gettext_lazy("主要指标"))
    def key_metrics(self, run: EvalRun) -> str:
        return " · ".join(f"{name} {value}" for name, value in metric_cells(run.metrics)) or "—"

    @admin.display(description=gettext_lazy("p50 (ms)"))
    def p50(self, run: EvalRun) -> str:
        value = (run.latency_ms or {}).get("p50")
        return f"{value:.1f}" if isinstance(value, (int, float)) else "—"

    @admin.display(description=gettext_lazy("运行参数"))
    def config_table(self, run: EvalRun):
        return _table([_("参数"), _("值")], sorted((k, str(v)) for k, v in run.config.items()))

    @admin.display(description=gettext_lazy("指标"))
    def metric_table(self, run: EvalRun):
        return _table([_("指标"), _("值")], metric_cells(run.metrics))

    @admin.display(description=gettext_lazy("路由与命中类型"))
    def distribution_table(self, run: EvalRun):
        metrics = run.metrics or {}
        rows = [(_("路由"), name, count) for name, count in sorted((metrics.get("routes") or {}).items())]
        rows += [(_("命中类型"), name, count) for name, count in sorted((metrics.get("hit_types") or {}).items())]
        return _table([_("分布"), _("取值"), _("次数")], rows) if rows else "—"

    @admin.display(description=gettext_lazy("置信度校准"))
    def calibration_table(self, run: EvalRun):
        rows = [(row["level"], row["count"], row["answerable"], f"{row['accuracy']:.2%}")
                for row in (run.metrics or {}).get("calibration") or []]
        return _table([_("置信度"), _("问题数"), _("可回答"), _("正确率")], rows) if rows else "—"

    @admin.display(description=gettext_lazy("延迟 (ms)"))
    def latency_table(self, run: EvalRun):
        latency = run.latency_ms or {}
        rows = [(_("总计"), latency.get("p50", "—"), latency.get("p95", "—"))]
        rows += [(stage, v.get("p50", "—"), v.get("p95", "—")) for stage, v in (latency.get("stages") or {}).items()]
        return _table([_("阶段"), "p50", "p95"], rows)

    @admin.display(description=gettext_lazy("模型调用与费用（每 1,000 个问题）"))
    def usage_table(self, run: EvalRun):
        usage = run.usage or {}
        calls, tokens = usage.get("calls_per_1000") or {}, usage.get("tokens_per_1000") or {}
        rows = [(kind, calls[kind], tokens.get(kind, 0)) for kind in sorted(calls)]
        rows.append((_("估算费用"), "", usage.get("cost_per_1000", 0)))
        return _table([_("调用"), _("次数"), _("token")], rows)

    @admin.display(description=gettext_lazy("逐题结果"))
    def case_rows(self, run: EvalRun):
        results = EvalCaseResult.objects.filter(run=run).order_by("id")[:500]
        rows = [
            (
                result.case_key, result.question,
                "、".join(result.gold) or "—",
                "；".join(f"{item['rank']}. {item.get('title') or item['key']}" for item in result.retrieved[:5]) or "—",
                result.gold_rank or _("未找到"),
                result.answer[:200] or "—",
            )
            for result in results
        ]
        return _table([_("编号"), _("问题"), _("期望"), _("检索结果（前 5）"), _("期望文档名次"), _("回答")], rows,
                      css_class="rag-case-results")


def _table(headers, rows, *, css_class: str = ""):
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join(
        "", "<tr>{}</tr>",
        ((format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows),
    )
    return format_html('<table class="{}"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', css_class, head, body)
