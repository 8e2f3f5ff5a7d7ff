from __future__ import annotations

from django import forms
from django.utils.functional import lazy
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import format_lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from .contracts import MAX_CANDIDATE_K, MAX_DOCUMENT_IDS, MAX_FILTERS, MAX_QUESTION_CHARS, MAX_TOP_K
from .filters import InvalidFilter, parse_filters
from .labels import MODES

FILTER_EXAMPLE = ('[{"field": "部门", "op": "eq", "value": "人力资源部"}, '
                  '{"field": "file_type", "op": "in", "value": ["pdf", "docx"]}, '
                  '{"field": "生效日期", "op": "range", "gte": "2025-01-01"}]')
BUILT_IN_FIELDS = ("title", "file_type", "source_tag", "created_at", "updated_at", "item")


def filters_help() -> SafeString:
    """The filter field's help in the active language, its syntax as code (it is typed as is)."""
    return format_html(
        "{} <code>{}</code>{}{}{}",
        gettext("JSON 列表，条件须同时满足（最多 %(n)s 个），例如") % {"n": MAX_FILTERS},
        FILTER_EXAMPLE,
        format_html(gettext("。内置字段（{} 为商品/型号名称）："), format_html("<code>{}</code>", "item")),
        format_html_join("、", "<code>{}</code>", ((name,) for name in BUILT_IN_FIELDS)),
        gettext("；其他字段按自定义元数据的键。"),
    )


class HitTestForm(forms.Form):
    """The hit test's options: field names as the retrieval API spells them, labels in staff's words."""

    question = forms.CharField(label=_("问题"), max_length=MAX_QUESTION_CHARS, widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))
    mode = forms.ChoiceField(
        label=_("检索方式"), choices=list(MODES.items()), initial="hybrid",
        help_text=_("语义检索按意思找，关键词检索按字词找，混合检索两者都用并合并排序。"),
    )
    top_k = forms.IntegerField(
        label=_("返回条数"), min_value=1, max_value=MAX_TOP_K, initial=5,
        help_text=format_lazy(_("最终列出的结果条数（最多 {n} 条）。"), n=MAX_TOP_K),
    )
    candidate_k = forms.IntegerField(
        label=_("候选条数"), min_value=1, max_value=MAX_CANDIDATE_K, initial=30,
        help_text=format_lazy(_("每种检索先取多少条候选，再合并排序（不少于返回条数，最多 {n} 条）。"), n=MAX_CANDIDATE_K),
    )
    enable_query_rewrite = forms.BooleanField(
        label=_("查询改写"), required=False,
        help_text=_("让模型把问题改写成更适合检索的说法，与原问题一起检索。"),
    )
    enable_rerank = forms.BooleanField(
        label=_("重排"), required=False, initial=True,
        help_text=_("使用离线的本地模型时没有能提升效果的重排模型：勾选后不重排，并在轨迹中注明。"),
    )
    enable_parent_expansion = forms.BooleanField(
        label=_("上下文扩展（Small2Big）"), required=False, initial=True,
        help_text=_("命中分块后补上它前后的内容，让回答读到完整的上下文。"),
    )
    enable_hyde = forms.BooleanField(
        label=_("假设答案检索"), required=False,
        help_text=_("先让模型写一个假设的答案，与问题一起向量化后检索，结果与其他通道融合（需要能写出文字的模型）。"),
    )
    dynamic_top_k = forms.BooleanField(
        label=_("动态返回条数"), required=False,
        help_text=_("按重排分数的明显落差（比上一条下降超过 25% 或 0.5）决定返回条数，最多 10 条，不受返回条数限制（需要重排）。"),
    )
    enable_web_search = forms.BooleanField(
        label=_("网络搜索"), required=False,
        help_text=_("知识库已开启网络搜索且部署配置了搜索服务时，同时检索网络，网页结果与知识库结果一起排序并标为网络来源。"),
    )
    document_ids = forms.CharField(label=_("限定文档 ID"), required=False, help_text=_("逗号分隔，最多 50 个。"))
    filters = forms.CharField(
        label=_("元数据筛选"), required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text=lazy(lambda: filters_help(), SafeString)(),
    )

    def clean_document_ids(self):
        raw = self.cleaned_data["document_ids"].replace("，", ",")
        try:
            ids = sorted({int(part) for part in raw.split(",") if part.strip()})
        except ValueError as exc:
            raise forms.ValidationError(_("文档 ID 必须是整数。")) from exc
        if len(ids) > MAX_DOCUMENT_IDS:
            raise forms.ValidationError(_("最多 50 个文档 ID。"))
        return tuple(ids)

    def clean_filters(self):
        try:
            return parse_filters(self.cleaned_data["filters"])
        except InvalidFilter as error:
            raise forms.ValidationError(str(error.message), code=error.code) from error

    def clean(self):
        data = super().clean()
        if data.get("candidate_k") and data.get("top_k") and data["candidate_k"] < data["top_k"]:
            self.add_error("candidate_k", _("候选条数不能小于返回条数。"))
        return data
