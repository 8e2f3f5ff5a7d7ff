"""Django admin for knowledge: staff-only, every write goes through `services`."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import Count, Exists, OuterRef
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponseRedirect
from django.template.loader import render_to_string
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

from . import services
from .access import Role, access_asset, can_create_knowledge_base, knowledge_bases_with_role
from .admin_display import (
    duration_label,
    file_format,
    file_type_label,
    metadata_table,
    quiet_code,
    region_label,
    regions_label,
    size_label,
    text_analysis_label,
    worker_label,
)
from .admin_scope import KnowledgeScopedAdmin, KnowledgeScopedInline
from .forms import (
    FAQForm,
    KnowledgeBaseAddForm,
    SwitchVersionForm,
    UploadDocumentsForm,
    embedding_model_label,
    embedding_model_name,
)
from .models import (
    FAQ,
    CacheNamespace,
    Chunk,
    Document,
    DocumentAsset,
    KnowledgeBase,
    KnowledgeBaseVersion,
    VersionActivation,
    VersionStatus,
)
from .locators import locator_label
from .release_gate import MetricDelta, ReleaseReport, blocking_reason, release_gate
from .selectors import VersionChanges, document_timeline, ingestion_queue, retained_versions_holding, version_changes

# The layout of the knowledge and evaluation admin pages: lists that fit the window, tables of
# labelled fields, rendered FAQ answers.
ADMIN_CSS = {"all": ["knowledge/admin.css"]}
# FAQ answers are markdown: the admin renders them with the answering admin's renderer (the chat
# page's marked and DOMPurify, nothing in an answer followed), from a JSON data block per answer.
FAQ_ANSWER_JS = ["vendor/marked/marked.umd.js", "vendor/dompurify/purify.min.js", "chat/admin_answer.js"]

# 生效中 (active) and 就绪 (ready) must not look alike: one answers questions, the other could.
STATUS_COLOURS = {
    "ready": "#0e7490", "active": "#15803d", "failed": "#b91c1c", "building": "#b45309",
    "queued": "#6b7280", "parsing": "#1d4ed8", "indexing": "#1d4ed8", "uploaded": "#6b7280",
    "retired": "#6b7280",
}


def status_badge(value: str, label: str, **data: object):
    attrs = format_html_join(" ", 'data-{}="{}"', ((k.replace("_", "-"), v) for k, v in data.items()))
    return format_html(
        '<span class="rag-status" {} style="color:{};font-weight:600">{}</span>',
        attrs, STATUS_COLOURS.get(value, "#111827"), label,
    )


def render_chunk_text(text: str):
    """A chunk as staff read it: GFM tables (how the chunker writes tables) as HTML tables,
    everything else as wrapped text. Every cell is escaped."""
    blocks, table = [], []

    def flush_table() -> None:
        rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table
                if not set(line.replace("|", "").strip()) <= set("-: ")]
        if rows:
            head, *body = rows
            blocks.append(format_html(
                '<table class="rag-chunk-table"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
                format_html_join("", "<th>{}</th>", ((c,) for c in head)),
                format_html_join("", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((c,) for c in row)),) for row in body)),
            ))
        table.clear()

    lines: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            if lines:
                blocks.append(format_html('<div style="white-space:pre-wrap">{}</div>', "\n".join(lines)))
                lines = []
            table.append(line)
            continue
        if table:
            flush_table()
        lines.append(line)
    if table:
        flush_table()
    if lines:
        blocks.append(format_html('<div style="white-space:pre-wrap">{}</div>', "\n".join(lines)))
    return format_html_join("", "{}", ((b,) for b in blocks))


def _report(request: HttpRequest, error: DomainError) -> None:
    messages.error(request, f"{error.message}（{error.code}）")


# --- knowledge bases ---------------------------------------------------------------------------


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(KnowledgeScopedAdmin):
    list_display = ["name", "slug", "visibility", "active_version_label", "document_total", "faq_total", "embedding_model_short", "hit_test_link", "updated_at"]
    list_filter = ["visibility"]
    search_fields = ["name", "slug", "description"]
    filter_horizontal = ["allowed_groups", "editor_groups", "publisher_groups"]
    readonly_fields = ["embedding_model_words", "embedding_dimension", "text_analysis_words", "active_version", "created_by", "created_at", "updated_at", "links"]
    fieldsets = [
        (None, {"fields": ["slug", "name", "description", "support_contact"]}),
        (gettext_lazy("访问控制"), {"fields": ["visibility", "allowed_groups", "editor_groups", "publisher_groups"]}),
        (gettext_lazy("回答中的链接"), {"fields": ["link_allowed_hosts"]}),
        (gettext_lazy("分块与向量"), {"fields": ["chunk_size_tokens", "chunk_overlap_tokens", "embedding_model_words", "embedding_dimension", "text_analysis_words"]}),
        (gettext_lazy("检索词典"), {"fields": ["custom_terms"]}),
        (gettext_lazy("上线检查"), {"fields": ["release_max_regression_points"]}),
        (gettext_lazy("状态"), {"fields": ["active_version", "links", "created_by", "created_at", "updated_at"]}),
    ]
    actions = ["create_draft", "rollback_to_previous", "reanalyse_with_dictionary"]
    knowledge_base_path = None
    delete_role = Role.PUBLISHER  # deleting purges everything it holds

    class Media:
        css = ADMIN_CSS

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("active_version").annotate(
            _documents=Count("documents", distinct=True), _faqs=Count("faqs", distinct=True)
        )

    def has_add_permission(self, request):
        return request.user.is_staff and can_create_knowledge_base(request.user)

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is None:
            # Chosen on the add form instead (embedding_choice); fixed afterwards.
            return [name for name in fields if name not in ("embedding_model_words", "embedding_dimension")]
        if obj is not None:
            fields += ["slug", "chunk_size_tokens", "chunk_overlap_tokens"]
            if not self.holds(request, obj, Role.PUBLISHER):
                fields += ["visibility", "allowed_groups", "editor_groups", "publisher_groups", "release_max_regression_points",
                           "link_allowed_hosts"]
        return fields

    def get_fieldsets(self, request, obj=None):
        if obj is not None:
            return self.fieldsets
        swap = {"embedding_model_words": "embedding_choice"}
        return [(title, {**options, "fields": [swap.get(name, name) for name in options["fields"]
                                               if name != "embedding_dimension"]})
                for title, options in self.fieldsets]

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = KnowledgeBaseAddForm
        form = super().get_form(request, obj, **kwargs)
        if obj is not None or request.user.is_superuser:
            return form

        class CreatorIsPublisherForm(form):
            def clean(self):
                cleaned = super().clean()
                if not request.user.groups.filter(pk__in=[g.pk for g in cleaned.get("publisher_groups") or []]).exists():
                    self.add_error("publisher_groups", _("请把你所在的一个用户组设为发布者用户组，否则创建后你将无法管理这个知识库。"))
                return cleaned

        return CreatorIsPublisherForm

    @admin.display(description=gettext_lazy("生效版本"), ordering="active_version__number")
    def active_version_label(self, kb: KnowledgeBase):
        return f"v{kb.active_version.number}" if kb.active_version_id else "—"

    @admin.display(description=gettext_lazy("文档数"), ordering="_documents")
    def document_total(self, kb: KnowledgeBase) -> int:
        return kb._documents

    @admin.display(description=gettext_lazy("向量模型"), ordering="embedding_model")
    def embedding_model_short(self, kb: KnowledgeBase) -> str:
        return embedding_model_name(kb.embedding_model)

    @admin.display(description=gettext_lazy("向量模型"))
    def embedding_model_words(self, kb: KnowledgeBase) -> SafeString:
        return quiet_code(embedding_model_label(kb.embedding_model), kb.embedding_model)

    @admin.display(description=gettext_lazy("文本分析"))
    def text_analysis_words(self, kb: KnowledgeBase) -> SafeString:
        return quiet_code(text_analysis_label(kb.text_analysis), kb.text_analysis)

    @admin.display(description=gettext_lazy("FAQ 数"), ordering="_faqs")
    def faq_total(self, kb: KnowledgeBase) -> int:
        return kb._faqs

    @admin.display(description=gettext_lazy("命中测试"))
    def hit_test_link(self, kb: KnowledgeBase):
        return format_html('<a href="{}">{}</a>', reverse("hit-test", args=[kb.pk]), _("测试"))

    @admin.display(description=gettext_lazy("快捷入口"))
    def links(self, kb: KnowledgeBase):
        if not kb.pk:
            return "—"
        return format_html(
            '<a href="{}?knowledge_base__id__exact={}">{}</a> · <a href="{}?knowledge_base__id__exact={}">{}</a> · '
            '<a href="{}?knowledge_base={}">{}</a> · <a href="{}?knowledge_base__id__exact={}">{}</a> · '
            '<a href="{}">{}</a>',
            reverse("admin:knowledge_document_changelist"), kb.pk, _("文档"),
            reverse("admin:knowledge_knowledgebaseversion_changelist"), kb.pk, _("版本"),
            reverse("admin:knowledge_document_upload"), kb.pk, _("上传文档"),
            reverse("admin:knowledge_faq_changelist"), kb.pk, _("FAQ"),
            reverse("hit-test", args=[kb.pk]), _("命中测试"),
        )

    def save_model(self, request, obj, form, change):
        if change:
            services.update_knowledge_base(
                kb=obj, actor=request.user, name=obj.name, description=obj.description,
                visibility=obj.visibility, support_contact=obj.support_contact,
                custom_terms=obj.custom_terms, release_max_regression_points=obj.release_max_regression_points,
                link_allowed_hosts=obj.link_allowed_hosts.splitlines(),
            )
            return
        kb = services.create_knowledge_base(
            slug=obj.slug, name=obj.name, description=obj.description, visibility=obj.visibility,
            allowed_groups=form.cleaned_data.get("allowed_groups", []),
            editor_groups=form.cleaned_data.get("editor_groups", []),
            publisher_groups=form.cleaned_data.get("publisher_groups", []),
            support_contact=obj.support_contact, chunk_size_tokens=obj.chunk_size_tokens,
            chunk_overlap_tokens=obj.chunk_overlap_tokens, custom_terms=obj.custom_terms,
            link_allowed_hosts=obj.link_allowed_hosts.splitlines(),
            embedding_model=form.cleaned_data.get("embedding_choice") or None, actor=request.user,
        )
        if obj.release_max_regression_points is not None:
            services.update_knowledge_base(kb=kb, actor=request.user,
                                           release_max_regression_points=obj.release_max_regression_points)
        obj.pk = kb.pk
        obj.text_analysis = kb.text_analysis
        obj.embedding_model, obj.embedding_dimension = kb.embedding_model, kb.embedding_dimension

    # Deleting goes through the service (rows, then files and vectors after commit); Django's
    # confirmation page lists what goes instead of refusing over the protected activation log.
    def get_deleted_objects(self, objs, request):
        lines, counts = [], {}
        for kb in objs:
            contents = services.knowledge_base_contents(kb=kb)
            lines.append(
                _("%(kb)s：%(v)s 个版本、%(d)s 个文档（%(c)s 个分块，及其原文件、图片与向量）、%(f)s 条 FAQ、"
                  "%(s)s 个会话") % {"kb": kb, "v": contents.versions, "d": contents.documents,
                                     "c": contents.chunks, "f": contents.faqs, "s": contents.conversations}
            )
            counts[str(KnowledgeBase._meta.verbose_name)] = counts.get(str(KnowledgeBase._meta.verbose_name), 0) + 1
        return lines, counts, set(), []

    def delete_model(self, request, obj):
        services.delete_knowledge_base(kb=obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for kb in queryset:
            services.delete_knowledge_base(kb=kb, actor=request.user)

    @admin.action(description=gettext_lazy("按词典重建索引"))
    def reanalyse_with_dictionary(self, request, queryset):
        for kb in self.allowed(request, queryset, Role.EDITOR):
            try:
                services.schedule_reanalysis(kb=kb, actor=request.user)
            except DomainError as error:
                _report(request, error)
                continue
            messages.success(
                request, _("已开始按词典重建 %(kb)s 的关键词索引，文档在此期间仍可检索。") % {"kb": kb.name}
            )

    @admin.action(description=gettext_lazy("创建草稿版本（基于生效版本）"))
    def create_draft(self, request, queryset):
        for kb in self.allowed(request, queryset, Role.EDITOR):
            try:
                version = services.create_draft_version(kb=kb, actor=request.user)
            except DomainError as error:
                _report(request, error)
            else:
                messages.success(request, _("已为 %(kb)s 创建草稿 v%(n)s。") % {"kb": kb.name, "n": version.number})

    @admin.action(description=gettext_lazy("回滚到上一个生效版本…"))
    def rollback_to_previous(self, request, queryset):
        queryset = self.allowed(request, queryset, Role.PUBLISHER)
        if not queryset:
            return None
        return _confirm_switch(
            self, request, queryset, action="rollback_to_previous",
            title=_("回滚知识库"),
            describe=lambda kb: _("%(kb)s：回滚到上一个生效版本") % {"kb": kb.name},
            perform=lambda kb, reason, _override: services.rollback_version(kb=kb, actor=request.user, reason=reason),
        )


def _confirm_switch(model_admin, request, queryset, *, action, title, describe, perform, allow_override=False):
    """Confirmation page with a required reason, then one service call per selected object
    (`perform(obj, reason, override)`; `override` is the release-check override, when offered)."""
    form = SwitchVersionForm(request.POST if request.POST.get("confirm") else None, allow_override=allow_override)
    if request.POST.get("confirm") and form.is_valid():
        for obj in queryset:
            try:
                activation = perform(obj, form.cleaned_data["reason"], form.cleaned_data.get("override_release_check", False))
            except DomainError as error:
                _report(request, error)
            else:
                messages.success(
                    request,
                    _("%(kb)s 已切换到 v%(n)s，检索缓存已更新到第 %(epoch)s 版。")
                    % {"kb": activation.knowledge_base.name, "n": activation.to_version.number, "epoch": activation.cache_epoch},
                )
        return None
    return _confirmation_page(
        model_admin, request, queryset, action=action, title=title, form=form, submit_label=_("确认"),
        intro=_("请确认以下版本切换。切换一次完成：切换生效版本、写入切换记录并更新检索缓存版本（旧的缓存结果随即不再使用）；"
                "任何一步失败时都保持原版本不变。"),
        items=[describe(obj) for obj in queryset],
    )


def render_version_changes(changes: VersionChanges):
    """The documents a publish adds, replaces and removes for readers, as the publish page lists them."""
    if changes.against is None:
        lead = _("首次发布，读者将看到以下文档：")
    else:
        lead = _("与当前生效版本 v%(n)s 相比：") % {"n": changes.against}
    groups = [(_("新增"), changes.added), (_("更新"), changes.changed), (_("移除"), changes.removed)]
    rows = format_html_join("", '<li>{}（{}）：{}</li>', (
        (label, len(titles), "、".join(titles[:20]) + ("…" if len(titles) > 20 else "")) for label, titles in groups if titles
    ))
    if not rows:
        rows = format_html("<li>{}</li>", _("文档没有变化。"))
    return format_html('<div class="rag-version-changes"><p>{}</p><ul>{}</ul></div>', lead, rows)


def render_release_report(version: KnowledgeBaseVersion, report):
    """The release check as the publish page shows it: deltas, lost and gained questions."""
    if report is None:
        return format_html('<div class="rag-release">{}</div>', _("该知识库没有默认评测集，未做上线检查。"))
    refusal = blocking_reason(version=version, report=report)
    warning = format_html('<p class="errornote">{}</p>', refusal) if refusal else ""
    return format_html('<div class="rag-release">{}{}</div>', warning, _release_report_body(report))


def _release_report_body(report: ReleaseReport) -> SafeString:
    if report.status in ("pending", "running"):
        body = format_html("<p>{}</p>", _("上线检查进行中（评测集「%(set)s」）。") % {"set": report.eval_set})
    elif report.status == "failed":
        body = format_html("<p>{}</p>", _("上线检查失败：%(error)s") % {"error": report.error})
    else:
        rows = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", (
            (m.name, _fmt(m.active), _fmt(m.draft),
             "—" if m.delta_points is None else f"{m.delta_points:+.1f}")
            for m in report.metrics
        ))
        lost = format_html_join("", "<li>{}</li>", ((q,) for q in report.lost[:20]))
        gained = format_html_join("", "<li>{}</li>", ((q,) for q in report.gained[:20]))
        body = format_html(
            '<p>{}</p><table><thead><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr></thead><tbody>{}</tbody></table>'
            '<p>{}</p><ul class="rag-lost">{}</ul><p>{}</p><ul class="rag-gained">{}</ul>',
            _("上线检查（评测集「%(set)s」）：草稿与当前生效版本对比。") % {"set": report.eval_set},
            _("指标"), _("生效版本"), _("草稿"), _("变化（百分点）"), rows,
            _("生效版本能找到、草稿找不到的问题：%(n)d") % {"n": len(report.lost)}, lost,
            _("草稿新找到的问题：%(n)d") % {"n": len(report.gained)}, gained,
        )
    return body


def render_recorded_release_check(check: dict) -> SafeString | str:
    """The release check an activation recorded (`ReleaseReport.as_dict`, plus the override)."""
    if not check:
        return _("未做上线检查。")
    report = ReleaseReport(
        status=check.get("status", "done"), eval_set=str(check.get("eval_set", "")),
        metrics=tuple(MetricDelta(name=str(m.get("name", "")), active=m.get("active"), draft=m.get("draft"))
                      for m in check.get("metrics") or [] if isinstance(m, dict)),
        lost=tuple(check.get("lost") or ()), gained=tuple(check.get("gained") or ()), error=str(check.get("error", "")),
    )
    override = format_html('<p class="errornote">{}</p>', _("检查未通过，已填写原因强制发布：%(refusal)s") % {
        "refusal": check.get("refusal") or "—"}) if check.get("overridden") else ""
    return format_html('<div class="rag-release">{}{}</div>', override, _release_report_body(report))


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.4f}"


def _confirm_destructive(model_admin, request, queryset, *, action, title, intro, describe, perform):
    """A page saying what will be removed, then `perform(obj)` per selected object on confirm."""
    if request.POST.get("confirm"):
        for obj in queryset:
            perform(obj)
        return None
    return _confirmation_page(
        model_admin, request, queryset, action=action, title=title, intro=intro, submit_label=_("确认删除"),
        items=[describe(obj) for obj in queryset],
    )


def _confirmation_page(model_admin, request, queryset, *, action, title, intro, items, submit_label, form=None):
    """One page for every action that asks first: what will happen, then confirm or cancel."""
    return TemplateResponse(request, "admin/knowledge/confirm_action.html", {
        **model_admin.admin_site.each_context(request),
        "title": title, "intro": intro, "items": items, "form": form, "submit_label": submit_label,
        "queryset": queryset, "action": action, "action_checkbox_name": ACTION_CHECKBOX_NAME,
        "opts": model_admin.model._meta,
    })


# --- versions ----------------------------------------------------------------------------------


@admin.register(KnowledgeBaseVersion)
class KnowledgeBaseVersionAdmin(KnowledgeScopedAdmin):
    list_display = ["__str__", "knowledge_base", "number", "label", "status_label", "document_total", "created_by", "created_at", "activated_at"]
    list_filter = ["status", "knowledge_base"]
    search_fields = ["label", "notes", "knowledge_base__name", "knowledge_base__slug"]
    readonly_fields = ["knowledge_base", "number", "status", "based_on", "created_by", "created_at", "ready_at", "activated_at", "retired_at", "document_list"]
    fields = ["knowledge_base", "number", "label", "notes", "status", "based_on", "created_by", "created_at", "ready_at", "activated_at", "retired_at", "document_list"]
    actions = ["activate", "rollback", "mark_ready", "retire"]

    class Media:
        css = ADMIN_CSS

    def has_add_permission(self, request):
        return False  # drafts are created from a knowledge base or by uploading documents

    def has_delete_permission(self, request, obj=None):
        return False  # versions are retired, never deleted: the activation log refers to them

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("knowledge_base", "created_by").annotate(_documents=Count("documents"))

    @admin.display(description=gettext_lazy("状态"), ordering="status")
    def status_label(self, version: KnowledgeBaseVersion):
        return status_badge(version.status, version.get_status_display())

    @admin.display(description=gettext_lazy("文档数"), ordering="_documents")
    def document_total(self, version: KnowledgeBaseVersion) -> int:
        return version._documents

    @admin.display(description=gettext_lazy("文档"))
    def document_list(self, version: KnowledgeBaseVersion):
        rows = version.documents.order_by("title")
        return format_html(
            "<ul>{}</ul>",
            format_html_join(
                "", '<li><a href="{}">{}</a> — {}</li>',
                ((reverse("admin:knowledge_document_change", args=[d.pk]), d.title, d.get_status_display()) for d in rows),
            ),
        ) if rows else "—"

    @admin.action(description=gettext_lazy("发布所选版本…"))
    def activate(self, request, queryset):
        queryset = self.allowed(request, queryset, Role.PUBLISHER)
        if not queryset:
            return None
        gate = release_gate()
        reports = {v.pk: gate.report(version=v) if gate is not None else None for v in queryset}
        return _confirm_switch(
            self, request, queryset, action="activate", title=_("发布版本"),
            describe=lambda v: format_html(
                "{}{}{}", _("%(kb)s：发布 v%(n)s") % {"kb": v.knowledge_base.name, "n": v.number},
                render_version_changes(version_changes(version=v)),
                render_release_report(v, reports[v.pk]),
            ),
            perform=lambda v, reason, override: services.activate_version(
                version=v, actor=request.user, reason=reason, override_release_check=override,
            ),
            allow_override=any(blocking_reason(version=v, report=reports[v.pk]) for v in queryset),
        )

    @admin.action(description=gettext_lazy("回滚到所选版本…"))
    def rollback(self, request, queryset):
        queryset = self.allowed(request, queryset, Role.PUBLISHER)
        if not queryset:
            return None
        return _confirm_switch(
            self, request, queryset, action="rollback", title=_("回滚版本"),
            describe=lambda v: _("%(kb)s：回滚到 v%(n)s") % {"kb": v.knowledge_base.name, "n": v.number},
            perform=lambda v, reason, _override: services.rollback_version(kb=v.knowledge_base, to_version=v, actor=request.user, reason=reason),
        )

    @admin.action(description=gettext_lazy("标记为就绪"))
    def mark_ready(self, request, queryset):
        for version in self.allowed(request, queryset, Role.EDITOR):
            try:
                services.mark_version_ready(version=version)
            except DomainError as error:
                _report(request, error)
            else:
                messages.success(request, _("%(v)s 已就绪。") % {"v": version})

    @admin.action(description=gettext_lazy("退役所选版本…（只属于这些版本的文档会被彻底删除）"))
    def retire(self, request, queryset):
        def describe(version: KnowledgeBaseVersion) -> str:
            doomed = [d.title for d in version.documents.all()
                      if not retained_versions_holding(document=d).exclude(pk=version.pk).exists()]
            if not doomed:
                return _("%(v)s：退役；它的文档都还在其他版本中，不删除任何文档。") % {"v": version}
            return _("%(v)s：退役，并彻底删除只属于它的 %(n)s 个文档（原文件、分块、图片与向量）：%(t)s") % {
                "v": version, "n": len(doomed), "t": "、".join(doomed[:10]) + ("…" if len(doomed) > 10 else ""),
            }

        def perform(version: KnowledgeBaseVersion) -> None:
            try:
                services.retire_version(version=version, actor=request.user)
            except DomainError as error:
                _report(request, error)
            else:
                messages.success(request, _("%(v)s 已退役。") % {"v": version})

        queryset = self.allowed(request, queryset, Role.PUBLISHER)
        if not queryset:
            return None
        return _confirm_destructive(
            self, request, queryset, action="retire", title=_("退役版本"),
            intro=_("退役后的版本不能再发布或回滚。以下内容将被删除，且无法恢复："),
            describe=describe, perform=perform,
        )


@admin.register(VersionActivation)
class VersionActivationAdmin(KnowledgeScopedAdmin):
    list_display = ["created_at", "knowledge_base", "action", "from_version", "to_version", "actor", "reason", "cache_epoch"]
    list_filter = ["action", "knowledge_base"]
    search_fields = ["reason", "knowledge_base__name", "actor__username"]
    date_hierarchy = "created_at"
    fields = ["knowledge_base", "action", "from_version", "to_version", "actor", "reason", "release_check_words",
              "cache_epoch", "created_at"]
    readonly_fields = fields

    class Media:
        css = ADMIN_CSS

    @admin.display(description=gettext_lazy("上线检查"))
    def release_check_words(self, activation: VersionActivation) -> SafeString | str:
        return render_recorded_release_check(activation.release_check or {})

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("knowledge_base", "from_version", "to_version", "actor")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


# --- documents ---------------------------------------------------------------------------------


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
    list_display = ["title", "knowledge_base", "file_type_short", "status_label", "membership", "chunks", "size_kb", "attempts", "error_short", "created_at"]
    list_filter = ["status", "knowledge_base", FileTypeFilter, "source_tag"]
    search_fields = ["title", "original_name", "sha256", "external_id"]
    readonly_fields = [
        "knowledge_base", "title", "original_name", "file_format_words", "sha256", "size_words",
        "source_tag", "external_id", "status", "status_changed_at", "error_words", "attempts",
        "timeline", "worker_words", "heartbeat_at", "lease_words", "page_count", "chunks", "versions_list", "chunks_link",
        "metadata_words", "created_by", "created_at", "updated_at",
    ]
    fields = readonly_fields
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
            services.retry_document(document=document, actor=request.user)
        except DomainError as error:
            _report(request, error)
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
                services.retry_document(document=document, actor=request.user)
                retried += 1
            except DomainError as error:
                _report(request, error)
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
            return _confirm_destructive(
                self, request, queryset, action="delete_documents", title=_("删除文档"),
                intro=_("已发布的版本不会改变：文档先从草稿移除，没有任何保留版本引用时才彻底删除。"),
                describe=describe, perform=lambda document: None,
            )
        for document in queryset:
            title = document.title
            try:
                outcome = services.delete_document(document=document, actor=request.user)
            except DomainError as error:
                _report(request, error)
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
                outcomes = services.upload_documents(
                    kb=kb, files=form.cleaned_data["files"], source_tag=form.cleaned_data["source_tag"], actor=request.user,
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


def faq_answer(text: str, *, element_id: str, css_class: str = "rag-faq-answer") -> str:
    """An FAQ answer: escaped text, and its markdown as a JSON data block the page's script renders
    in place (as the answering admin does with answers; an FAQ answer cites nothing)."""
    return render_to_string("admin/knowledge/faq/answer.html", {
        "element_id": element_id, "css_class": css_class,
        "source": {"text": text, "citations": [], "assets": [], "asset_url": ""},
    })


class FAQHitFilter(admin.SimpleListFilter):
    title = gettext_lazy("命中情况")
    parameter_name = "hits"

    def lookups(self, request, model_admin):
        return [("hit", _("已命中")), ("never", _("从未命中"))]

    def queryset(self, request, queryset):
        if self.value() == "hit":
            return queryset.filter(hit_count__gt=0)
        if self.value() == "never":
            return queryset.filter(hit_count=0)
        return queryset


@admin.register(FAQ)
class FAQAdmin(KnowledgeScopedAdmin):
    form = FAQForm
    list_display = ["question", "answer_short", "knowledge_base", "enabled", "hit_count", "source_tag", "updated_at"]
    list_filter = ["enabled", FAQHitFilter, "knowledge_base", "source_tag"]
    search_fields = ["question", "answer", "similar_questions"]
    # Most used first: staff curate the answers readers actually get; the header re-sorts.
    ordering = ["-hit_count", "knowledge_base", "question"]
    sortable_by = ["question", "knowledge_base", "enabled", "hit_count", "source_tag", "updated_at"]
    list_editable = []
    readonly_fields = ["answer_preview", "hit_count", "created_by", "created_at", "updated_at"]
    fields = ["knowledge_base", "question", "similar_questions_text", "answer", "answer_preview", "source_tag", "enabled", "hit_count",
              "created_by", "created_at", "updated_at"]
    actions = ["enable", "disable", "delete_faqs"]

    class Media:
        css = ADMIN_CSS
        js = FAQ_ANSWER_JS

    @admin.display(description=gettext_lazy("答案"))
    def answer_short(self, faq: FAQ) -> str:
        return faq_answer(faq.answer, element_id=f"faq-answer-{faq.pk}", css_class="rag-faq-answer rag-faq-answer-short")

    @admin.display(description=gettext_lazy("答案显示效果"))
    def answer_preview(self, faq: FAQ) -> SafeString | str:
        if not faq.pk:
            return _("保存后在这里显示读者看到的答案。")
        return format_html('{}<p class="rag-quiet">{}</p>', faq_answer(faq.answer, element_id="faq-answer-saved"),
                           _("已保存的答案按读者看到的样子显示；修改后保存即可更新。"))

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def save_model(self, request, obj, form, change):
        faq = services.save_faq(
            kb=form.cleaned_data["knowledge_base"],
            faq=obj if change else None,
            question=form.cleaned_data["question"],
            answer=form.cleaned_data["answer"],
            similar_questions=form.similar_questions(),
            source_tag=form.cleaned_data["source_tag"],
            enabled=form.cleaned_data["enabled"],
            actor=request.user,
        )
        obj.pk = faq.pk

    def delete_model(self, request, obj):
        services.delete_faq(faq=obj, actor=request.user)

    def _set_enabled(self, request, queryset, enabled: bool) -> None:
        queryset = self.allowed(request, queryset, Role.EDITOR)
        for faq in queryset:
            services.save_faq(
                kb=faq.knowledge_base, faq=faq, question=faq.question, answer=faq.answer,
                similar_questions=faq.similar_questions, source_tag=faq.source_tag, enabled=enabled, actor=request.user,
            )
        messages.success(request, _("已更新 %(n)d 条 FAQ。") % {"n": queryset.count()})

    @admin.action(description=gettext_lazy("启用所选 FAQ"))
    def enable(self, request, queryset):
        self._set_enabled(request, queryset, True)

    @admin.action(description=gettext_lazy("停用所选 FAQ"))
    def disable(self, request, queryset):
        self._set_enabled(request, queryset, False)

    @admin.action(description=gettext_lazy("删除所选 FAQ"))
    def delete_faqs(self, request, queryset):
        count = 0
        for faq in self.allowed(request, queryset, Role.EDITOR):
            services.delete_faq(faq=faq, actor=request.user)
            count += 1
        messages.success(request, _("已删除 %(n)d 条 FAQ。") % {"n": count})


CACHE_HELP = gettext_lazy(
    "每个知识库的检索结果会缓存一段时间，以便重复的问题更快得到回答。缓存版本在发布或回滚版本、修改 FAQ、"
    "修改可见范围、已发布文档重新处理完成或手动清除时加一；此后旧版本的缓存结果不再使用，无需逐条删除。"
)


@admin.register(CacheNamespace)
class CacheNamespaceAdmin(KnowledgeScopedAdmin):
    change_list_template = "admin/knowledge/cachenamespace/change_list.html"
    # The scope ("kb:<id>") is the key retrieval looks the version up by; the knowledge base names it.
    list_display = ["knowledge_base", "cache_epoch", "updated_at"]
    list_display_links = ["knowledge_base"]
    readonly_fields = ["knowledge_base", "cache_epoch", "updated_at"]
    fieldsets = [(None, {"fields": readonly_fields, "description": CACHE_HELP})]
    actions = ["invalidate"]

    class Media:
        css = ADMIN_CSS

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), "cache_help": CACHE_HELP})

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description=gettext_lazy("使所选知识库的检索缓存失效"))
    def invalidate(self, request, queryset):
        for namespace in self.allowed(request, queryset, Role.EDITOR).select_related("knowledge_base"):
            if namespace.knowledge_base is not None:
                epoch = services.invalidate_cache(kb=namespace.knowledge_base, actor=request.user)
                messages.success(request, _("%(kb)s 的检索缓存已清除，缓存版本更新到第 %(e)s 版。") % {"kb": namespace.knowledge_base.name, "e": epoch})


admin.site.site_header = gettext_lazy("ragsite 知识库管理")
admin.site.site_title = gettext_lazy("ragsite")
admin.site.index_title = gettext_lazy("知识库与问答管理")
