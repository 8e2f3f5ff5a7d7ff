"""App configs of the site: tracing set up once per process (`TelemetryConfig`), and
django_tasks_db's with an admin section staff can read and workers whose memory does not grow
under DEBUG."""

from __future__ import annotations

from django.apps import AppConfig
from django.db import reset_queries
from django.utils.translation import gettext_lazy as _
from django_tasks_db.apps import TasksAppConfig

from ragsite import telemetry


class TelemetryConfig(AppConfig):
    """Every process that sets Django up (daphne, the ingestion worker, commands) configures
    its tracing here, before it serves or runs anything."""

    name = "ragsite"
    verbose_name = "ragsite"

    def ready(self) -> None:
        telemetry.configure()


class TaskResultsConfig(TasksAppConfig):
    # The package calls its admin section "Tasks Database Backend", untranslated.
    verbose_name = _("后台任务")

    def ready(self) -> None:
        super().ready()
        from django_tasks.signals import task_started

        # Under DEBUG every query is kept (up to 9,000 per connection) until the next request
        # starts; a worker serves no requests, so each task starts the log afresh instead — a
        # 100,000-file import otherwise held hundreds of MB of logged bulk-insert SQL.
        task_started.connect(_reset_queries, dispatch_uid="ragsite-reset-queries-per-task")


def _reset_queries(**kwargs) -> None:
    reset_queries()
