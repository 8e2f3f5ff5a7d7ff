"""Admin pages scoped by the per-knowledge-base roles of `knowledge.access`.

Being staff only opens the admin. What a staff member sees and changes there follows their role
on each knowledge base: its editors see its rows, publishers may also publish and purge, and
rows of other knowledge bases are not listed and their pages answer 404, as in the API.
Superusers see everything.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import get_fields_from_path
from django.db.models import Q
from django.utils.translation import gettext as _

from knowledge.access import Role, holds_role_anywhere, is_superuser, knowledge_bases_with_role, role_in
from knowledge.models import KnowledgeBase


class KnowledgeScopedAdmin(admin.ModelAdmin):
    """A model admin for rows that belong to a knowledge base (`knowledge_base_path`; None
    when the rows are knowledge bases)."""

    knowledge_base_path: str | None = "knowledge_base"
    view_role = Role.EDITOR
    add_role = Role.EDITOR
    change_role = Role.EDITOR
    delete_role = Role.EDITOR

    def knowledge_base_of(self, obj) -> KnowledgeBase | None:
        if self.knowledge_base_path is None:
            return obj
        for attribute in self.knowledge_base_path.split("__"):
            obj = getattr(obj, attribute)
            if obj is None:
                return None
        return obj

    def scoped(self, queryset, user, role: Role):
        if is_superuser(user):
            return queryset
        lookup = "pk__in" if self.knowledge_base_path is None else f"{self.knowledge_base_path}__in"
        return queryset.filter(**{lookup: knowledge_bases_with_role(user, role)})

    def holds(self, request, obj, role: Role) -> bool:
        user = request.user
        if not (user.is_active and user.is_staff):
            return False
        if obj is None:
            return holds_role_anywhere(user, role)
        kb = self.knowledge_base_of(obj)
        return is_superuser(user) if kb is None else role_in(user, kb) >= role

    def get_queryset(self, request):
        return self.scoped(super().get_queryset(request), request.user, self.view_role)

    def has_module_permission(self, request):
        return self.holds(request, None, self.view_role)

    def has_view_permission(self, request, obj=None):
        return self.holds(request, obj, self.view_role)

    def has_add_permission(self, request):
        return self.holds(request, None, self.add_role)

    def has_change_permission(self, request, obj=None):
        return self.holds(request, obj, self.change_role)

    def has_delete_permission(self, request, obj=None):
        return self.holds(request, obj, self.delete_role)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        # New rows can only be filed under a knowledge base the user may change.
        if db_field.related_model is KnowledgeBase:
            kwargs["queryset"] = knowledge_bases_with_role(request.user, self.add_role)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_list_filter(self, request):
        # The sidebar names related rows (knowledge bases, evaluation sets, ...) of the rows
        # shown and that the user may see, not every name in the system.
        return [
            (name, VisibleRelatedFilter)
            if isinstance(name, str) and get_fields_from_path(self.model, name)[-1].is_relation else name
            for name in super().get_list_filter(request)
        ]

    def allowed(self, request, queryset, role: Role):
        """The selected objects the user holds `role` on, as a queryset; says which were skipped."""
        permitted = [obj.pk for obj in queryset if self.holds(request, obj, role)]
        refused = len(queryset) - len(permitted)
        if refused:
            messages.error(
                request,
                (_("已跳过 %(n)s 项：只有知识库的发布者可以进行此操作。") if role == Role.PUBLISHER
                 else _("已跳过 %(n)s 项：只有知识库的编辑者可以进行此操作。")) % {"n": refused},
            )
        return queryset.filter(pk__in=permitted)


class VisibleRelatedFilter(admin.RelatedOnlyFieldListFilter):
    """A relation's filter listing the related rows of the rows shown, and of those only the ones
    the user may see on their own admin pages: a run that used another knowledge base's
    evaluation set does not name that set to someone who does not edit it."""

    def field_choices(self, field, request, model_admin):
        shown = Q(pk__in=model_admin.get_queryset(request).distinct().values_list(f"{self.field_path}__pk", flat=True))
        related_admin = model_admin.admin_site._registry.get(field.related_model)
        if isinstance(related_admin, KnowledgeScopedAdmin):
            visible = related_admin.scoped(field.related_model._default_manager.all(), request.user, related_admin.view_role)
            shown &= Q(pk__in=visible.values("pk"))
        ordering = self.field_admin_ordering(field, request, model_admin)
        return field.get_choices(include_blank=False, limit_choices_to=shown, ordering=ordering)


class KnowledgeScopedInline:
    """An inline on a scoped admin: it shows what its parent page shows."""

    def has_view_permission(self, request, obj=None):
        return self._parent().has_view_permission(request, obj)

    def has_add_permission(self, request, obj=None):
        return self._parent().has_change_permission(request, obj)

    def has_change_permission(self, request, obj=None):
        return self._parent().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return self._parent().has_change_permission(request, obj)

    def _parent(self) -> KnowledgeScopedAdmin:
        return self.admin_site._registry[self.parent_model]
