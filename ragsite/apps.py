"""App configs for third-party apps whose admin section needs a name staff can read."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from django_tasks_db.apps import TasksAppConfig


class TaskResultsConfig(TasksAppConfig):
    # The package calls its admin section "Tasks Database Backend", untranslated.
    verbose_name = _("后台任务")
