"""Admin of the audit log: read-only, each staff member sees the entries of the knowledge bases
they edit (a deleted knowledge base's entries: superusers)."""

from __future__ import annotations

from django.contrib import admin
from django.utils.translation import gettext_lazy

from knowledge.admin.common import ADMIN_CSS
from knowledge.admin.scope import KnowledgeScopedAdmin
from knowledge.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(KnowledgeScopedAdmin):
    list_display = ["created_at", "knowledge_base_label", "action_words", "target", "actor_label"]
    list_filter = ["action", "knowledge_base"]
    search_fields = ["target", "knowledge_base_slug", "actor__username"]
    date_hierarchy = "created_at"
    fields = ["created_at", "knowledge_base_label", "action_words", "target", "actor_label"]
    readonly_fields = fields

    class Media:
        css = ADMIN_CSS

    @admin.display(description=gettext_lazy("知识库"), ordering="knowledge_base_slug")
    def knowledge_base_label(self, entry: AuditEntry) -> str:
        if entry.knowledge_base is None:
            return gettext_lazy("%(slug)s（已删除）") % {"slug": entry.knowledge_base_slug}
        return str(entry.knowledge_base)

    @admin.display(description=gettext_lazy("操作"), ordering="action")
    def action_words(self, entry: AuditEntry) -> str:
        return entry.get_action_display()

    @admin.display(description=gettext_lazy("操作人"), ordering="actor__username")
    def actor_label(self, entry: AuditEntry) -> str:
        return entry.actor.get_username() if entry.actor else gettext_lazy("命令行或后台任务")

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("knowledge_base", "actor")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
