"""Admin of the item catalog: items (written through the item services, importable from a table)
and the chunk tags staff add or exclude."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ragsite.errors import DomainError

from knowledge.access import Role, knowledge_bases_with_role
from knowledge.admin.common import ADMIN_CSS
from knowledge.admin.scope import KnowledgeScopedAdmin
from knowledge.forms import ChunkItemForm, ImportItemsForm, ItemForm
from knowledge.items import services as item_services
from knowledge.models import Chunk, ChunkItem, Item, TagSource


@admin.register(Item)
class ItemAdmin(KnowledgeScopedAdmin):
    form = ItemForm
    list_display = ["name", "names", "group", "knowledge_base", "chunks", "enabled", "updated_at"]
    list_filter = ["enabled", "knowledge_base", "group"]
    search_fields = ["name", "aliases", "codes", "group"]
    readonly_fields = ["chunks", "created_at", "updated_at"]
    fields = ["knowledge_base", "name", "aliases_text", "codes_text", "group", "group_aliases_text", "description",
              "enabled", "chunks", "created_at", "updated_at"]
    actions = ["delete_items"]
    change_list_template = "admin/knowledge/item/change_list.html"

    class Media:
        css = ADMIN_CSS

    @admin.display(description=gettext_lazy("别名与代码"))
    def names(self, item: Item) -> str:
        return "、".join([*(item.aliases or []), *(item.codes or [])]) or "—"

    @admin.display(description=gettext_lazy("相关分块"))
    def chunks(self, item: Item):
        if not item.pk:
            return "—"
        count = item.chunk_tags.exclude(source=TagSource.EXCLUDED).count()
        url = reverse("admin:knowledge_chunkitem_changelist") + f"?item__id__exact={item.pk}"
        return format_html('<a href="{}">{}</a>', url, _("%(n)d 个分块") % {"n": count})

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def get_urls(self):
        return [
            path("import/", self.admin_site.admin_view(self.import_view), name="knowledge_item_import"),
        ] + super().get_urls()

    def save_model(self, request, obj, form, change):
        # The form checked the names (ItemForm.clean) and the name's uniqueness (the constraint).
        item = item_services.save_item(
            kb=form.cleaned_data["knowledge_base"], item=obj if change else None, name=form.cleaned_data["name"],
            aliases=form.names("aliases_text"), codes=form.names("codes_text"), group=form.cleaned_data["group"],
            group_aliases=form.names("group_aliases_text"), description=form.cleaned_data["description"],
            enabled=form.cleaned_data["enabled"], actor=request.user,
        )
        obj.pk = item.pk

    def delete_model(self, request, obj):
        item_services.delete_item(item=obj, actor=request.user)

    @admin.action(description=gettext_lazy("删除所选商品/型号"))
    def delete_items(self, request, queryset):
        count = 0
        for item in self.allowed(request, queryset, Role.EDITOR):
            item_services.delete_item(item=item, actor=request.user)
            count += 1
        messages.success(request, _("已删除 %(n)d 个商品/型号。") % {"n": count})

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "import_url": reverse("admin:knowledge_item_import")}
        return super().changelist_view(request, extra_context)

    def import_view(self, request):
        if not self.holds(request, None, Role.EDITOR):
            raise PermissionDenied
        form = ImportItemsForm(request.POST or None, request.FILES or None,
                               knowledge_bases=knowledge_bases_with_role(request.user, Role.EDITOR))
        if request.method == "POST" and form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                report = item_services.import_items(
                    kb=form.cleaned_data["knowledge_base"], file_name=upload.name,
                    data=upload.read(settings.RAG_MAX_IMPORT_BYTES + 1), actor=request.user,
                )
            except DomainError as error:
                form.add_error("file", str(error.message))
            else:
                messages.success(request, _("已导入：新增 %(created)d 个，更新 %(updated)d 个。") % {
                    "created": report.created, "updated": report.updated})
                for line in report.errors[:20]:
                    messages.warning(request, line)
                return HttpResponseRedirect(reverse("admin:knowledge_item_changelist"))
        return TemplateResponse(request, "admin/knowledge/form_page.html", {
            **self.admin_site.each_context(request), "title": _("导入商品/型号"), "form": form,
            "opts": self.model._meta, "form_id": "import-items-form", "submit_label": _("导入"),
        })


@admin.register(ChunkItem)
class ChunkItemAdmin(KnowledgeScopedAdmin):
    """Which chunks are about which item. Detected tags are rewritten whenever the catalog or a
    document changes; staff add their own (manual) or say a chunk is not about an item it names
    (excluded), and those stay."""

    knowledge_base_path = "item__knowledge_base"
    form = ChunkItemForm
    list_display = ["item", "chunk_excerpt", "document", "source"]
    list_filter = ["source", "item__knowledge_base", "item"]
    search_fields = ["item__name", "chunk__content", "document__title"]
    list_select_related = ["item", "chunk", "document"]
    actions = ["remove_tags"]

    class Media:
        css = ADMIN_CSS

    @admin.display(description=gettext_lazy("分块内容"))
    def chunk_excerpt(self, tag: ChunkItem):
        text = tag.chunk.content
        url = reverse("admin:knowledge_chunk_change", args=[tag.chunk_id])
        return format_html('<a href="{}">{}</a>', url, text[:60] + ("…" if len(text) > 60 else ""))

    def has_change_permission(self, request, obj=None):
        return False  # a tag is added or removed, not edited

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        # Only items and chunks of knowledge bases the user edits: another base's chunk id is
        # "not a valid choice", exactly like one that does not exist.
        editable = knowledge_bases_with_role(request.user, Role.EDITOR)
        if db_field.name == "item":
            kwargs["queryset"] = Item.objects.filter(knowledge_base__in=editable).select_related("knowledge_base")
        elif db_field.name == "chunk":
            kwargs["queryset"] = Chunk.objects.filter(knowledge_base__in=editable)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def save_model(self, request, obj, form, change):
        # The form offered only editable items and chunks and checked they share a base.
        chunk, item = form.cleaned_data["chunk"], form.cleaned_data["item"]
        tag = item_services.tag_chunk(chunk=chunk, item=item, source=form.cleaned_data["source"], actor=request.user)
        obj.pk = tag.pk

    def delete_model(self, request, obj):
        item_services.remove_tag(tag=obj, actor=request.user)

    @admin.action(description=gettext_lazy("删除所选标签"))
    def remove_tags(self, request, queryset):
        count = 0
        for tag in self.allowed(request, queryset, Role.EDITOR):
            item_services.remove_tag(tag=tag, actor=request.user)
            count += 1
        messages.success(request, _("已删除 %(n)d 个标签。") % {"n": count})
