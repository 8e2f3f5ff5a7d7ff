"""The background task list in words: what each task does and to what, not its dotted path.

django-tasks-db's own admin shows a task as its function name, its arguments and result as raw
JSON and its change page as "DBTaskResult object (…)". Staff read the queue to see whether their
uploads and release checks ran, so each task is named by what it does and its arguments by what
they point at; the raw JSON stays one click away for an operator.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.utils.translation import gettext_noop
from django_tasks_db.admin import DBTaskResultAdmin
from django_tasks_db.models import DBTaskResult, get_date_max

# By task function name: the name is what django-tasks stores and what a queued row keeps
# across releases, so the labels follow it rather than importing the tasks (apps above this
# module's layer define them).
TASK_LABELS = {
    "ingest_documents_task": gettext_noop("文档入库"),
    "ingest_document_task": gettext_noop("文档入库"),
    "index_faqs": gettext_noop("FAQ 索引"),
    "reanalyse_task": gettext_noop("按词典重建索引"),
    "release_check_task": gettext_noop("发布前检查"),
}
ARGUMENT_LABELS = {
    "document_ids": gettext_noop("文档"),
    "document_id": gettext_noop("文档"),
    "kb_id": gettext_noop("知识库"),
    "faq_ids": gettext_noop("FAQ"),
    "version_id": gettext_noop("版本"),
}
QUEUE_LABELS = {"ingestion": gettext_noop("文档处理"), "default": gettext_noop("默认")}


def task_label(result: DBTaskResult) -> str:
    name = result.task_path.rpartition(".")[2]
    return _(TASK_LABELS[name]) if name in TASK_LABELS else name


def arguments_label(result: DBTaskResult) -> str:
    stored = result.args_kwargs if isinstance(result.args_kwargs, Mapping) else {}
    kwargs = stored.get("kwargs") or {}
    parts = []
    for key, value in kwargs.items():
        values = value if isinstance(value, list) else [value]
        shown = "、".join(str(v) for v in values[:10]) + (_(" 等 %(n)d 个") % {"n": len(values)} if len(values) > 10 else "")
        parts.append(f"{_(ARGUMENT_LABELS[key]) if key in ARGUMENT_LABELS else key} {shown}")
    return "；".join(parts) or "—"


def queue_label(name: str) -> str:
    return _(QUEUE_LABELS[name]) if name in QUEUE_LABELS else name


def raw_json(value: object) -> SafeString:
    if value in (None, "", [], {}):
        return format_html("{}", "—")
    text = json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
    return format_html("<details><summary>{}</summary><pre>{}</pre></details>", _("原始数据"), text)


class QueueFilter(admin.SimpleListFilter):
    title = gettext_lazy("队列")
    parameter_name = "queue_name"

    def lookups(self, request, model_admin):
        names = model_admin.get_queryset(request).order_by().values_list("queue_name", flat=True).distinct()
        return [(name, queue_label(name)) for name in sorted(names)]

    def queryset(self, request, queryset):
        return queryset.filter(queue_name=self.value()) if self.value() else queryset


class ReadableTaskResultAdmin(DBTaskResultAdmin):
    list_filter = ("status", QueueFilter)
    list_display = ("task", "arguments", "status", "enqueued_at", "started_at", "finished_at", "queue")
    list_display_links = ("task",)
    fields = readonly_fields = (
        "task", "arguments", "status", "enqueued_at", "started_at", "finished_at", "queue", "workers",
        "priority", "earliest_start", "result", "exception_class_path", "traceback_text", "raw_arguments", "task_id",
    )

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields

    def get_fields(self, request, obj=None):
        return self.fields

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        # The stock subtitle is the model's str(): "DBTaskResult object (uuid)".
        result = self.get_object(request, object_id) if object_id else None
        subtitle = f"{task_label(result)} · {arguments_label(result)}" if result else None
        return super().changeform_view(request, object_id, form_url, {**(extra_context or {}), "subtitle": subtitle})

    @admin.display(description=gettext_lazy("任务"), ordering="task_path")
    def task(self, obj: DBTaskResult) -> str:
        return task_label(obj)

    @admin.display(description=gettext_lazy("处理对象"))
    def arguments(self, obj: DBTaskResult) -> str:
        return arguments_label(obj)

    @admin.display(description=gettext_lazy("队列"), ordering="queue_name")
    def queue(self, obj: DBTaskResult) -> str:
        return queue_label(obj.queue_name)

    @admin.display(description=gettext_lazy("处理进程"))
    def workers(self, obj: DBTaskResult) -> str:
        return "、".join(str(w) for w in obj.worker_ids or []) or "—"

    @admin.display(description=gettext_lazy("最早运行时间"))
    def earliest_start(self, obj: DBTaskResult):
        # The package stores "no delay" as the latest representable date.
        return "—" if obj.run_after == get_date_max() else obj.run_after

    @admin.display(description=gettext_lazy("结果"))
    def result(self, obj: DBTaskResult) -> SafeString:
        return raw_json(obj.return_value)

    @admin.display(description=gettext_lazy("错误堆栈"))
    def traceback_text(self, obj: DBTaskResult) -> SafeString:
        return format_html("<pre>{}</pre>", obj.traceback) if obj.traceback else format_html("{}", "—")

    @admin.display(description=gettext_lazy("任务 ID"))
    def task_id(self, obj: DBTaskResult) -> str:
        return str(obj.pk)

    @admin.display(description=gettext_lazy("参数（原始数据）"))
    def raw_arguments(self, obj: DBTaskResult) -> SafeString:
        return raw_json(obj.args_kwargs)
