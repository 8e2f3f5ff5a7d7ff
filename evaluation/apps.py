from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class EvaluationConfig(AppConfig):
    name = "evaluation"
    verbose_name = _("评测")

    def ready(self) -> None:
        from knowledge.signals import version_ready

        from .release import schedule_release_check

        version_ready.connect(schedule_release_check, dispatch_uid="evaluation-release-check")
