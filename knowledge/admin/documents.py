"""Admin of documents, their chunks and images: uploads, the processing queue, retries and
deletion through the document and catalog services."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import Exists, OuterRef
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.timezone import localtime
from django.urls import path, reverse
from django.utils.http import urlencode
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.utils.translation import ngettext

from ragsite.errors import DomainError

from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.access import Role, access_asset, knowledge_bases_with_role
from knowledge.admin.display import (
    duration_label,
    file_format,
    file_type_label,
    metadata_table,
    quiet_code,
    region_label,
    regions_label,
    size_label,
    worker_label,
)
from knowledge.admin.scope import KnowledgeScopedAdmin, KnowledgeScopedInline
from knowledge.attributes import attributes_summary
from knowledge.forms import DocumentAttributesForm, UploadDocumentsForm
from knowledge.items import selectors as item_selectors
from knowledge.models import Chunk, Document, DocumentAsset, KnowledgeBaseVersion, VersionStatus
from knowledge.locators import locator_label
from knowledge.catalog.selectors import retained_versions_holding
from knowledge.documents.selectors import document_timeline, ingestion_queue

from knowledge.admin.common import ADMIN_CSS, confirm_destructive, render_chunk_text, report_error, status_badge

class DocumentAssetInline(KnowledgeScopedInline, admin.TabularInline):
    model = DocumentAsset
    extra = 0
    can_delete = False
    fields = ["preview", "page", "width", "height", "caption"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description=gettext_lazy("预览"))
    def preview(self, asset: DocumentAsset):
        return format_html('<img src="{}" style="max-width:220px;max-height:160px">', reverse("admin:knowledge_documentasset_image", args=[asset.pk]))


class FileTypeFilter(admin.SimpleListFilter):
    """The formats of the documents listed, in words."""

    title = gettext_lazy("文件类型")
    parameter_name = "file_type"

    def lookups(self, request, model_admin):
        present = model_admin.get_queryset(request).order_by().values_list("file_type", flat=True).distinct()
        return sorted(((code, file_type_label(code)) for code in present), key=lambda item: item[1])

    def queryset(self, request, queryset):
        return queryset.filter(file_type=self.value()) if self.value() else queryset


@admin.register(Document)
class DocumentAdmin(KnowledgeScopedAdmin):
    change_list_template = "admin/knowledge/document/change_list.html"
    change_form_template = "admin/knowledge/document/change_form.html"
    # Staff's metadata is the one thing edited here (through the service, which checks it);
    # every other field is derived from the file and its processing.
    form = DocumentAttributesForm
    list_display = ["title", "knowledge_base", "file_type_short", "status_label", "membership", "chunks", "size_kb",
                    "attempts", "attributes_short", "error_short", "created_at"]
    list_filter = ["status", "knowledge_base", FileTypeFilter, "source_tag"]
    search_fields = ["title", "original_name", "sha256", "external_id"]
    readonly_fields = [
        "knowledge_base", "title", "original_name", "file_format_words", "sha256", "size_words",
        "source_tag", "external_id", "status", "status_changed_at", "error_words", "attempts",
        "timeline", "worker_words", "heartbeat_at", "lease_words", "page_count", "chunks", "versions_list", "chunks_link",
        "items_words", "metadata_words", "created_by", "created_at", "updated_at",
    ]
    fields = [
        "knowledge_base", "title", "original_name", "file_format_words", "sha256", "size_words",
        "source_tag", "attributes", "external_id", "status", "status_changed_at", "error_words", "attempts",
        "timeline", "worker_words", "heartbeat_at", "lease_words", "page_count", "chunks", "versions_list", "chunks_link",
        "items_words", "metadata_words", "created_by", "created_at", "updated_at",
    ]
    inlines = [DocumentAssetInline]
    actions = ["retry", "delete_documents"]

    class Media:
        css = ADMIN_CSS

    def get_queryset(self, request):
        memberships = KnowledgeBaseVersion.documents.through.objects.filter(document_id=OuterRef("pk"))
        return super().get_queryset(request).select_related("knowledge_base").annotate(
            _in_active=Exists(memberships.filter(knowledgebaseversion_id=OuterRef("knowledge_base__active_version_id"))),
            _in_draft=Exists(memberships.filter(knowledgebaseversion__status=VersionStatus.BUILDING)),
        )

    @admin.display(description=gettext_lazy("版本归属"))
    def membership(self, document: Document) -> str:
        # Which versions answer with it now (生效) and which will (草稿).
        labels = {
            (True, True): _("生效版本与草稿"), (True, False): _("仅生效版本"),
            (False, True): _("仅草稿"), (False, False): _("不在生效版本或草稿中"),
        }
        return labels[bool(document._in_active), bool(document._in_draft)]

    def has_add_permission(self, request):
        return False  # uploads go through the upload page, which validates and queues ingestion

    def save_model(self, request, obj, form, change):
        document_services.set_document_attributes(
            document=obj, attributes=form.cleaned_data["attributes"], actor=request.user
        )

    def has_delete_permission(self, request, obj=None):
        return False  # deletion keeps published versions intact: see the delete action

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def get_urls(self):
        return [
            path("upload/", self.admin_site.admin_view(self.upload_view), name="knowledge_document_upload"),
            path("queue/", self.admin_site.admin_view(self.queue_view), name="knowledge_document_queue"),
            path("<int:document_id>/retry/", self.admin_site.admin_view(self.retry_view), name="knowledge_document_retry"),
        ] + super().get_urls()

    def retry_view(self, request, document_id: int):
        document = self.get_object(request, str(document_id))
        if request.method != "POST" or document is None or not self.has_change_permission(request, document):
            return HttpResponseRedirect(reverse("admin:knowledge_document_changelist"))
        try:
            document_services.retry_document(document=document, actor=request.user)
        except DomainError as error:
            report_error(request, error)
        else:
            messages.success(request, _("%(t)s 已重新排队。") % {"t": document.title})
        return HttpResponseRedirect(reverse("admin:knowledge_document_change", args=[document.pk]))

    def changelist_view(self, request, extra_context=None):
        kb_ids = request.GET.get("knowledge_base__id__exact")
        editable = knowledge_bases_with_role(request.user, Role.EDITOR)
        watched = list(editable.filter(pk=int(kb_ids)).values_list("pk", flat=True)) if kb_ids and kb_ids.isdigit() \
            else list(editable.values_list("pk", flat=True)[:20])
        extra_context = {**(extra_context or {}), "watched_kb_ids": watched, "upload_url": reverse("admin:knowledge_document_upload"),
                         "queue_url": reverse("admin:knowledge_document_queue")}
        return super().changelist_view(request, extra_context)

    @admin.display(description=gettext_lazy("状态"), ordering="status")
    def status_label(self, document: Document):
        return status_badge(document.status, document.get_status_display(), doc_status=document.pk)

    @admin.display(description=gettext_lazy("分块数"), ordering="chunk_count")
    def chunks(self, document: Document):
        # While a run embeds it, how far it has come (the live view updates this cell).
        return format_html('<span data-doc-chunks="{}">{}</span>', document.pk,
                           document.embedding_progress() or document.chunk_count)

    @admin.display(description=gettext_lazy("自定义元数据"))
    def attributes_short(self, document: Document) -> str:
        return attributes_summary(document.attributes) or "—"

    @admin.display(description=gettext_lazy("大小 (KB)"), ordering="size")
    def size_kb(self, document: Document) -> str:
        return f"{document.size / 1024:.1f}"

    @admin.display(description=gettext_lazy("文件类型"), ordering="file_type")
    def file_type_short(self, document: Document) -> str:
        return file_type_label(document.file_type)

    @admin.display(description=gettext_lazy("文件类型"))
    def file_format_words(self, document: Document) -> SafeString:
        return file_format(document.file_type, document.mime_type)

    @admin.display(description=gettext_lazy("大小"))
    def size_words(self, document: Document) -> str:
        return size_label(document.size)

    @admin.display(description=gettext_lazy("处理进程"))
    def worker_words(self, document: Document) -> str:
        return worker_label(document.worker)

    @admin.display(description=gettext_lazy("处理期限"))
    def lease_words(self, document: Document) -> SafeString | str:
        if document.lease_expires_at is None:
            return "—"
        return format_html(
            '{} <span class="rag-quiet">{}</span>', localtime(document.lease_expires_at).strftime("%Y-%m-%d %H:%M:%S"),
            _("处理进程在此之前没有再报告进度时，文档会交给其他进程重新处理。"),
        )

    @admin.display(description=gettext_lazy("涉及的商品/型号"))
    def items_words(self, document: Document) -> SafeString | str:
        counts = item_selectors.document_items(document_id=document.pk)
        if not counts:
            return _("无（文档没有提到商品目录中的商品）")
        url = reverse("admin:knowledge_chunkitem_changelist") + "?" + urlencode({"document__id__exact": document.pk})
        return format_html('{} · <a href="{}">{}</a>', "、".join(
            _("%(name)s（%(n)d 个分块）") % {"name": name, "n": n} for name, n in counts),
            url, _("查看分块标签"))

    @admin.display(description=gettext_lazy("处理信息"))
    def metadata_words(self, document: Document) -> SafeString | str:
        return metadata_table(document.metadata)

    @admin.display(description=gettext_lazy("错误"))
    def error_short(self, document: Document) -> SafeString:
        # The message says what went wrong; its code (for operations) and the whole message are the tooltip.
        if not document.error_code:
            return format_html('<span data-doc-error="{}"></span>', document.pk)
        return format_html('<span data-doc-error="{}" title="{}">{}</span>', document.pk,
                           f"{document.error_code} · {document.error_message}", document.error_message[:60] or document.error_code)

    @admin.display(description=gettext_lazy("错误"))
    def error_words(self, document: Document) -> SafeString | str:
        if not document.error_code:
            return "—"
        return quiet_code(document.error_message or document.error_code, document.error_code)

    @admin.display(description=gettext_lazy("处理时间线"))
    def timeline(self, document: Document):
        steps = document_timeline(document=document, now=timezone.now())
        if not steps:
            return "—"
        rows = format_html_join(
            "", '<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>',
            (
                (
                    status_badge(step.status, step.label),
                    localtime(step.at).strftime("%Y-%m-%d %H:%M:%S"),
                    duration_label(step.seconds) + (_("（进行中）") if step.current and step.seconds is not None else ""),
                    step.attempt or "—", worker_label(step.worker), step.error_code or "",
                )
                for step in steps
            ),
        )
        return format_html(
            '<table class="rag-timeline"><thead><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th>'
            "</tr></thead><tbody>{}</tbody></table>",
            _("状态"), _("开始"), _("用时"), _("第几次处理"), _("处理进程"), _("错误码"), rows,
        )

    @admin.display(description=gettext_lazy("所在版本"))
    def versions_list(self, document: Document) -> str:
        return ", ".join(f"v{v.number}（{v.get_status_display()}）" for v in document.versions.order_by("number")) or "—"

    @admin.display(description=gettext_lazy("分块"))
    def chunks_link(self, document: Document):
        return format_html('<a href="{}?document__id__exact={}">{}</a>', reverse("admin:knowledge_chunk_changelist"), document.pk, _("查看 %(n)d 个分块") % {"n": document.chunk_count})

    @admin.action(description=gettext_lazy("重试所选失败文档"))
    def retry(self, request, queryset):
        retried = 0
        for document in self.allowed(request, queryset, Role.EDITOR):
            try:
                document_services.retry_document(document=document, actor=request.user)
                retried += 1
            except DomainError as error:
                report_error(request, error)
        if retried:
            messages.success(request, ngettext("已重新排队 %(n)d 个文档。", "已重新排队 %(n)d 个文档。", retried) % {"n": retried})

    @admin.action(description=gettext_lazy("删除所选文档…（从草稿移除，无版本引用时彻底删除）"))
    def delete_documents(self, request, queryset):
        queryset = self.allowed(request, queryset, Role.EDITOR)

        def describe(document: Document) -> str:
            kept = sorted(
                retained_versions_holding(document=document)
                .exclude(status=VersionStatus.BUILDING).values_list("number", flat=True)
            )
            if kept:
                return _("%(t)s：从草稿移除；它仍在版本 %(v)s 中，这些版本退役后才会彻底删除。") % {
                    "t": document.title, "v": ", ".join(f"v{n}" for n in kept)}
            return _("%(t)s：彻底删除（原文件、%(n)s 个分块、图片与向量）。") % {
                "t": document.title, "n": document.chunk_count}

        if not request.POST.get("confirm"):
            return confirm_destructive(
                self, request, queryset, action="delete_documents", title=_("删除文档"),
                intro=_("已发布的版本不会改变：文档先从草稿移除，没有任何保留版本引用时才彻底删除。"),
                describe=describe, perform=lambda document: None,
            )
        for document in queryset:
            title = document.title
            try:
                outcome = catalog_services.delete_document(document=document, actor=request.user)
            except DomainError as error:
                report_error(request, error)
                continue
            if outcome.purged:
                messages.success(request, _("%(t)s 已删除（文件、分块和向量一并清除）。") % {"t": title})
            else:
                messages.warning(
                    request,
                    _("%(t)s 已从草稿移除；它仍在已发布或就绪的版本 %(v)s 中，这些版本退役后才会彻底删除。")
                    % {"t": title, "v": ", ".join(f"v{n}" for n in outcome.retained_by)},
                )

    def queue_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        return TemplateResponse(request, "admin/knowledge/document/queue.html", {
            **self.admin_site.each_context(request), "title": _("处理队列"), "opts": self.model._meta,
            "queue": ingestion_queue(now=timezone.now(), knowledge_bases=knowledge_bases_with_role(request.user, Role.EDITOR)),
        })

    def upload_view(self, request):
        if not self.holds(request, None, Role.EDITOR):
            raise PermissionDenied
        initial = {}
        if request.GET.get("knowledge_base", "").isdigit():
            initial["knowledge_base"] = int(request.GET["knowledge_base"])
        form = UploadDocumentsForm(
            request.POST or None, request.FILES or None, initial=initial,
            knowledge_bases=knowledge_bases_with_role(request.user, Role.EDITOR),
        )
        if request.method == "POST" and form.is_valid():
            kb = form.cleaned_data["knowledge_base"]
            try:
                outcomes = document_services.upload_documents(
                    kb=kb, files=form.cleaned_data["files"], source_tag=form.cleaned_data["source_tag"],
                    attributes=form.cleaned_data["attributes"], actor=request.user,
                )
            except DomainError as error:
                per_file = error.extra.get("errors", [])
                # The per-file lines say it all; the summary repeated it for a single file.
                if not per_file:
                    form.add_error(None, str(error.message))
                for item in per_file:
                    form.add_error("files", f"{item['file']}: {item['detail']}")
            else:
                fresh = sum(1 for o in outcomes if not o.duplicate)
                duplicates = [o.document.title for o in outcomes if o.duplicate]
                messages.success(request, _("已上传 %(n)d 个文件到草稿版本，正在后台处理。") % {"n": fresh})
                if duplicates:
                    messages.info(request, _("内容相同的文件已存在，已直接加入草稿：%(names)s") % {"names": "、".join(duplicates)})
                return HttpResponseRedirect(f"{reverse('admin:knowledge_document_changelist')}?knowledge_base__id__exact={kb.pk}")
        return TemplateResponse(
            request,
            "admin/knowledge/document/upload.html",
            {**self.admin_site.each_context(request), "title": _("上传文档"), "form": form, "opts": self.model._meta,
             "form_id": "upload-form", "submit_label": _("上传")},
        )


@admin.register(Chunk)
class ChunkAdmin(KnowledgeScopedAdmin):
    list_display = ["id", "document", "ordinal", "content_type", "heading", "where", "token_count", "excerpt"]
    list_filter = ["content_type", "knowledge_base"]
    search_fields = ["content", "document__title"]
    list_select_related = ["document"]
    readonly_fields = ["document", "knowledge_base", "ordinal", "parent_block", "heading", "where", "regions", "content_type",
                       "token_count", "assets_list", "rendered", "created_at"]
    fields = readonly_fields

    class Media:
        css = ADMIN_CSS

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # derived from the document; the admin shows a read-only view

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description=gettext_lazy("标题路径"))
    def heading(self, chunk: Chunk) -> str:
        return " › ".join(str(part) for part in chunk.heading_path or []) or "—"

    @admin.display(description=gettext_lazy("位置"))
    def where(self, chunk: Chunk) -> str:
        return locator_label(chunk.locator or {}) or "—"

    @admin.display(description=gettext_lazy("页面区域"))
    def regions(self, chunk: Chunk) -> SafeString | str:
        return regions_label(chunk.bboxes)

    @admin.display(description=gettext_lazy("所属父块"))
    def parent_block(self, chunk: Chunk) -> SafeString | str:
        if not chunk.parent_id:
            return _("无（检索命中时只提供这一块）")
        ordinals = list(Chunk.objects.filter(document_id=chunk.document_id, parent_id=chunk.parent_id)
                        .order_by("ordinal").values_list("ordinal", flat=True))
        if len(ordinals) <= 1:
            return _("父块只含这一个分块。")
        url = reverse("admin:knowledge_chunk_changelist") + "?" + urlencode(
            {"document__id__exact": chunk.document_id, "parent_id": chunk.parent_id})
        return format_html(
            '{} · <a href="{}">{}</a><div class="help">{}</div>',
            _("序号 %(ordinals)s 的分块同属一个父块") % {"ordinals": "、".join(str(n) for n in ordinals)},
            url, _("查看同一父块的 %(n)d 个分块") % {"n": len(ordinals)},
            _("检索命中其中任一分块时，回答会带上同一父块的相邻内容作为上下文。"),
        )

    @admin.display(description=gettext_lazy("图片"))
    def assets_list(self, chunk: Chunk) -> SafeString | str:
        ids = [pk for pk in chunk.asset_ids or [] if isinstance(pk, int)]
        if not ids:
            return "—"
        return format_html_join(" ", '<a href="{}">{}</a>', (
            (reverse("admin:knowledge_documentasset_change", args=[pk]), _("图片 #%(id)s") % {"id": pk}) for pk in ids
        ))

    @admin.display(description=gettext_lazy("内容"))
    def rendered(self, chunk: Chunk):
        return render_chunk_text(chunk.content)

    @admin.display(description=gettext_lazy("内容"))
    def excerpt(self, chunk: Chunk) -> str:
        return chunk.content[:80] + ("…" if len(chunk.content) > 80 else "")


@admin.register(DocumentAsset)
class DocumentAssetAdmin(KnowledgeScopedAdmin):
    knowledge_base_path = "document__knowledge_base"

    list_display = ["id", "preview", "document", "page", "width", "height", "caption"]
    list_filter = ["document__knowledge_base"]
    search_fields = ["caption", "document__title"]
    readonly_fields = ["document", "ordinal", "page", "region", "width", "height", "caption", "sha256", "preview_large", "created_at"]
    fields = readonly_fields

    class Media:
        css = ADMIN_CSS

    @admin.display(description=gettext_lazy("页面区域"))
    def region(self, asset: DocumentAsset) -> str:
        return region_label(asset.bbox) if asset.bbox else "—"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # derived from the document; the admin shows a read-only view

    def has_delete_permission(self, request, obj=None):
        return False

    def get_urls(self):
        return [
            path("<int:asset_id>/image/", self.admin_site.admin_view(self.image_view), name="knowledge_documentasset_image"),
        ] + super().get_urls()

    def image_view(self, request, asset_id: int):
        try:
            asset = access_asset(user=request.user, asset_id=asset_id)
        except DomainError as error:
            raise Http404(str(error.message)) from error
        if not self.has_view_permission(request, asset):
            raise Http404
        try:
            handle = asset.file.open("rb")
        except OSError as exc:  # the row exists but storage lost the bytes: a 404, not a 500
            raise Http404(_("资源 %(id)s 的图片文件已丢失。") % {"id": asset_id}) from exc
        return FileResponse(handle, content_type="image/jpeg")

    @admin.display(description=gettext_lazy("预览"))
    def preview(self, asset: DocumentAsset):
        return format_html('<img src="{}" style="max-height:60px">', reverse("admin:knowledge_documentasset_image", args=[asset.pk]))

    @admin.display(description=gettext_lazy("图片"))
    def preview_large(self, asset: DocumentAsset):
        return format_html('<img src="{}" style="max-width:640px">', reverse("admin:knowledge_documentasset_image", args=[asset.pk]))


# --- FAQs --------------------------------------------------------------------------------------


