import logging

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class RetrievalConfig(AppConfig):
    name = "retrieval"
    verbose_name = _("检索")

    def ready(self) -> None:
        # jieba installs its own DEBUG-level handler on import; keep its dictionary chatter out
        # of server and worker logs.
        import jieba

        jieba.setLogLevel(logging.WARNING)
