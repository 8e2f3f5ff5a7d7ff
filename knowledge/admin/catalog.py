"""Admin of knowledge bases, their versions, the activation log and the cache version: every
write goes through the catalog services."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import Count
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ragsite.errors import DomainError

from knowledge.catalog import readiness
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.access import Role, can_create_knowledge_base
from knowledge.admin.display import quiet_code, text_analysis_label
from knowledge.admin.scope import KnowledgeScopedAdmin
from knowledge.forms import KnowledgeBaseAddForm, embedding_model_label, embedding_model_name
from knowledge.models import CacheNamespace, KnowledgeBase, KnowledgeBaseVersion, VersionActivation
from knowledge.catalog.release_gate import MetricDelta, ReleaseReport, blocking_reason, release_gate
from knowledge.catalog.selectors import VersionChanges, retained_versions_holding, version_changes

from knowledge.admin.common import ADMIN_CSS, confirm_destructive, confirm_switch, format_value, report_error, status_badge

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
        (gettext_lazy("网络搜索"), {"fields": ["web_search_enabled"]}),
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
                # Web search sends questions to a service outside: a publisher's decision, as the
                # audience is.
                fields += ["visibility", "allowed_groups", "editor_groups", "publisher_groups", "release_max_regression_points",
                           "link_allowed_hosts", "web_search_enabled"]
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
            catalog_services.update_knowledge_base(
                kb=obj, actor=request.user, name=obj.name, description=obj.description,
                visibility=obj.visibility, support_contact=obj.support_contact,
                custom_terms=obj.custom_terms, release_max_regression_points=obj.release_max_regression_points,
                link_allowed_hosts=obj.link_allowed_hosts.splitlines(),
                web_search_enabled=obj.web_search_enabled,
            )
            return
        kb = catalog_services.create_knowledge_base(
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
            catalog_services.update_knowledge_base(kb=kb, actor=request.user,
                                           release_max_regression_points=obj.release_max_regression_points)
        if obj.web_search_enabled:
            catalog_services.update_knowledge_base(kb=kb, actor=request.user, web_search_enabled=True)
        obj.pk = kb.pk
        obj.text_analysis = kb.text_analysis
        obj.embedding_model, obj.embedding_dimension = kb.embedding_model, kb.embedding_dimension

    # Deleting goes through the service (rows, then files and vectors after commit); Django's
    # confirmation page lists what goes instead of refusing over the protected activation log.
    def get_deleted_objects(self, objs, request):
        lines, counts = [], {}
        for kb in objs:
            contents = catalog_services.knowledge_base_contents(kb=kb)
            lines.append(
                _("%(kb)s：%(v)s 个版本、%(d)s 个文档（%(c)s 个分块，及其原文件、图片与向量）、%(f)s 条 FAQ、"
                  "%(s)s 个会话") % {"kb": kb, "v": contents.versions, "d": contents.documents,
                                     "c": contents.chunks, "f": contents.faqs, "s": contents.conversations}
            )
            counts[str(KnowledgeBase._meta.verbose_name)] = counts.get(str(KnowledgeBase._meta.verbose_name), 0) + 1
        return lines, counts, set(), []

    def delete_model(self, request, obj):
        catalog_services.delete_knowledge_base(kb=obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for kb in queryset:
            catalog_services.delete_knowledge_base(kb=kb, actor=request.user)

    @admin.action(description=gettext_lazy("按词典重建索引"))
    def reanalyse_with_dictionary(self, request, queryset):
        for kb in self.allowed(request, queryset, Role.EDITOR):
            try:
                document_services.schedule_reanalysis(kb=kb, actor=request.user)
            except DomainError as error:
                report_error(request, error)
                continue
            messages.success(
                request, _("已开始按词典重建 %(kb)s 的关键词索引，文档在此期间仍可检索。") % {"kb": kb.name}
            )

    @admin.action(description=gettext_lazy("创建草稿版本（基于生效版本）"))
    def create_draft(self, request, queryset):
        for kb in self.allowed(request, queryset, Role.EDITOR):
            try:
                version = catalog_services.create_draft_version(kb=kb, actor=request.user)
            except DomainError as error:
                report_error(request, error)
            else:
                messages.success(request, _("已为 %(kb)s 创建草稿 v%(n)s。") % {"kb": kb.name, "n": version.number})

    @admin.action(description=gettext_lazy("回滚到上一个生效版本…"))
    def rollback_to_previous(self, request, queryset):
        queryset = self.allowed(request, queryset, Role.PUBLISHER)
        if not queryset:
            return None
        return confirm_switch(
            self, request, queryset, action="rollback_to_previous",
            title=_("回滚知识库"),
            describe=lambda kb: _("%(kb)s：回滚到上一个生效版本") % {"kb": kb.name},
            perform=lambda kb, reason, _override: catalog_services.rollback_version(kb=kb, actor=request.user, reason=reason),
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
            (quiet_code(m.label or m.name, m.name), format_value(m.active), format_value(m.draft),
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
        metrics=tuple(MetricDelta(name=str(m.get("name", "")), active=m.get("active"), draft=m.get("draft"),
                                  label=str(m.get("label", "")))
                      for m in check.get("metrics") or [] if isinstance(m, dict)),
        lost=tuple(check.get("lost") or ()), gained=tuple(check.get("gained") or ()), error=str(check.get("error", "")),
    )
    override = format_html('<p class="errornote">{}</p>', _("检查未通过，已填写原因强制发布：%(refusal)s") % {
        "refusal": check.get("refusal") or "—"}) if check.get("overridden") else ""
    return format_html('<div class="rag-release">{}{}</div>', override, _release_report_body(report))




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
        return confirm_switch(
            self, request, queryset, action="activate", title=_("发布版本"),
            describe=lambda v: format_html(
                "{}{}{}", _("%(kb)s：发布 v%(n)s") % {"kb": v.knowledge_base.name, "n": v.number},
                render_version_changes(version_changes(version=v)),
                render_release_report(v, reports[v.pk]),
            ),
            perform=lambda v, reason, override: catalog_services.activate_version(
                version=v, actor=request.user, reason=reason, override_release_check=override,
            ),
            allow_override=any(blocking_reason(version=v, report=reports[v.pk]) for v in queryset),
        )

    @admin.action(description=gettext_lazy("回滚到所选版本…"))
    def rollback(self, request, queryset):
        queryset = self.allowed(request, queryset, Role.PUBLISHER)
        if not queryset:
            return None
        return confirm_switch(
            self, request, queryset, action="rollback", title=_("回滚版本"),
            describe=lambda v: _("%(kb)s：回滚到 v%(n)s") % {"kb": v.knowledge_base.name, "n": v.number},
            perform=lambda v, reason, _override: catalog_services.rollback_version(kb=v.knowledge_base, to_version=v, actor=request.user, reason=reason),
        )

    @admin.action(description=gettext_lazy("标记为就绪"))
    def mark_ready(self, request, queryset):
        for version in self.allowed(request, queryset, Role.EDITOR):
            try:
                readiness.mark_version_ready(version=version)
            except DomainError as error:
                report_error(request, error)
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
                catalog_services.retire_version(version=version, actor=request.user)
            except DomainError as error:
                report_error(request, error)
            else:
                messages.success(request, _("%(v)s 已退役。") % {"v": version})

        queryset = self.allowed(request, queryset, Role.PUBLISHER)
        if not queryset:
            return None
        return confirm_destructive(
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
                epoch = catalog_services.invalidate_cache(kb=namespace.knowledge_base, actor=request.user)
                messages.success(request, _("%(kb)s 的检索缓存已清除，缓存版本更新到第 %(e)s 版。") % {"kb": namespace.knowledge_base.name, "e": epoch})


