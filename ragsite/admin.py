"""Group, user and background task admin that read in one language.

Django stores permission names in English at migration time ("Can add 文档"), so the stock
picker mixes "Can add" with our Chinese model names. The four default actions are labelled from
their codenames instead, through i18n; custom permissions keep their (already translated) names.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, Permission, User
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop
from django_tasks_db.models import DBTaskResult

from ragsite.task_admin import ReadableTaskResultAdmin

# Apps whose rows only the product writes (the live-status event log): their permissions mean
# nothing to staff, and the package names them in untranslated English ("event counter").
INTERNAL_APPS = ("django_eventstream",)
ACTIONS = {"add": gettext_noop("添加"), "change": gettext_noop("修改"), "delete": gettext_noop("删除"), "view": gettext_noop("查看")}


def permission_label(permission: Permission) -> str:
    model = permission.content_type.model_class()
    if model is None:  # a stale content type: its model is gone
        return f"{permission.content_type.app_label} | {permission.name}"
    action, _sep, rest = permission.codename.partition("_")
    if action in ACTIONS and rest == model._meta.model_name:
        name = _("可以%(action)s%(model)s") % {"action": _(ACTIONS[action]), "model": model._meta.verbose_name}
    else:
        name = permission.name
    return f"{model._meta.app_config.verbose_name} | {model._meta.verbose_name} | {name}"


class PermissionChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj: Permission) -> str:
        return permission_label(obj)


class PermissionLabels:
    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name in ("permissions", "user_permissions"):
            kwargs["form_class"] = PermissionChoiceField
            kwargs.setdefault(
                "queryset", Permission.objects.select_related("content_type").exclude(content_type__app_label__in=INTERNAL_APPS)
            )
        return super().formfield_for_manytomany(db_field, request, **kwargs)


class LabelledGroupAdmin(PermissionLabels, GroupAdmin):
    pass


class LabelledUserAdmin(PermissionLabels, UserAdmin):
    pass


admin.site.unregister(Group)
admin.site.register(Group, LabelledGroupAdmin)
admin.site.unregister(User)
admin.site.register(User, LabelledUserAdmin)
admin.site.unregister(DBTaskResult)
admin.site.register(DBTaskResult, ReadableTaskResultAdmin)
