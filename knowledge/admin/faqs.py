"""Admin of FAQs: writes through the FAQ services, answers shown rendered."""

from __future__ import annotations

from django.contrib import admin, messages
from django.template.loader import render_to_string
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy


from knowledge.faqs import services as faq_services
from knowledge.access import Role
from knowledge.admin.scope import KnowledgeScopedAdmin
from knowledge.forms import FAQForm
from knowledge.models import FAQ

from knowledge.admin.common import ADMIN_CSS, FAQ_ANSWER_JS

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
        faq = faq_services.save_faq(
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
        faq_services.delete_faq(faq=obj, actor=request.user)

    def _set_enabled(self, request, queryset, enabled: bool) -> None:
        queryset = self.allowed(request, queryset, Role.EDITOR)
        for faq in queryset:
            faq_services.save_faq(
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
            faq_services.delete_faq(faq=faq, actor=request.user)
            count += 1
        messages.success(request, _("已删除 %(n)d 条 FAQ。") % {"n": count})
