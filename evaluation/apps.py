from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class EvaluationConfig(AppConfig):
    name = "evaluation"
    verbose_name = _("评测")
