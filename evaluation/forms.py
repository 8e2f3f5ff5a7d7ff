from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from knowledge.models import KnowledgeBase


class ImportEvalSetForm(forms.Form):
    name = forms.CharField(label=_("名称"), max_length=120, help_text=_("所选知识库中的同名评测集会按编号更新，重复导入同一文件不会产生变化。"))
    file = forms.FileField(
        label=_("文件"),
        help_text=_("JSONL、CSV 或 XLSX，每行一个问题：问题、期望文档（标题、文件名或外部 ID）、期望分块、参考答案、可回答。多个值用 | 分隔。"),
    )
    qrels = forms.FileField(
        label=_("qrels.jsonl（可选）"), required=False,
        help_text=_("共享评测集格式：上面选 queries.jsonl，这里选对应的 qrels.jsonl。"),
    )
    knowledge_base = forms.ModelChoiceField(
        label=_("知识库"), queryset=KnowledgeBase.objects.order_by("name"), required=False
    )
    default = forms.BooleanField(label=_("设为该知识库的默认评测集"), required=False)

    def __init__(self, *args, knowledge_bases=None, require_knowledge_base: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if knowledge_bases is not None:  # only those the importer edits
            self.fields["knowledge_base"].queryset = knowledge_bases.order_by("name")
        self.fields["knowledge_base"].required = require_knowledge_base
