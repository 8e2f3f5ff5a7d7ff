from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from .contracts import MAX_CANDIDATE_K, MAX_DOCUMENT_IDS, MAX_QUESTION_CHARS, MAX_TOP_K, MODES


class HitTestForm(forms.Form):
    question = forms.CharField(label=_("问题"), max_length=MAX_QUESTION_CHARS, widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))
    mode = forms.ChoiceField(label=_("模式"), choices=[(m, m) for m in MODES], initial="hybrid")
    top_k = forms.IntegerField(label="top_k", min_value=1, max_value=MAX_TOP_K, initial=5)
    candidate_k = forms.IntegerField(label="candidate_k", min_value=1, max_value=MAX_CANDIDATE_K, initial=30)
    enable_query_rewrite = forms.BooleanField(label=_("查询改写"), required=False)
    enable_rerank = forms.BooleanField(
        label=_("重排"), required=False, initial=True,
        help_text=_("使用本地模型提供方（local）时没有能提升效果的重排模型：勾选后不重排，并在轨迹中注明。"),
    )
    enable_parent_expansion = forms.BooleanField(label=_("上下文扩展（Small2Big）"), required=False, initial=True)
    enable_hyde = forms.BooleanField(label="HyDE", required=False)
    dynamic_top_k = forms.BooleanField(label=_("动态 top-k"), required=False)
    document_ids = forms.CharField(label=_("限定文档 ID"), required=False, help_text=_("逗号分隔，最多 50 个。"))

    def clean_document_ids(self):
        raw = self.cleaned_data["document_ids"].replace("，", ",")
        try:
            ids = sorted({int(part) for part in raw.split(",") if part.strip()})
        except ValueError as exc:
            raise forms.ValidationError(_("文档 ID 必须是整数。")) from exc
        if len(ids) > MAX_DOCUMENT_IDS:
            raise forms.ValidationError(_("最多 50 个文档 ID。"))
        return tuple(ids)

    def clean(self):
        data = super().clean()
        if data.get("candidate_k") and data.get("top_k") and data["candidate_k"] < data["top_k"]:
            self.add_error("candidate_k", _("candidate_k 不能小于 top_k。"))
        return data
