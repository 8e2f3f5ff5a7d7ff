"""The knowledge admin, one module per aggregate: knowledge bases and versions (`catalog`),
documents, chunks and images (`documents`), FAQs (`faqs`). Importing the package registers them
(Django's admin autodiscovery imports `knowledge.admin`)."""

from django.contrib import admin
from django.utils.translation import gettext_lazy

from knowledge.admin import audit, catalog, documents, faqs, items  # noqa: F401  (registration)

admin.site.site_header = gettext_lazy("ragsite 知识库管理")
admin.site.site_title = gettext_lazy("ragsite")
admin.site.index_title = gettext_lazy("知识库与问答管理")
