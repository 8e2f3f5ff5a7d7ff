"""Admin forms: input shapes only, the work happens in services."""

from __future__ import annotations

import json

from django import forms
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from engines.providers import embedding_choices
from engines.providers.e5 import E5_EMBEDDING_MODEL
from engines.providers.local import LOCAL_EMBEDDING_MODEL

from knowledge.attributes import MAX_ATTRIBUTE_KEYS, MAX_KEY_CHARS, InvalidAttributes, clean_attributes
from ragsite.errors import ValidationFailed

from knowledge.items.services import check_names as check_item_names
from knowledge.models import FAQ, ChunkItem, Document, Item, KnowledgeBase, TagSource

# What staff read about an embedding model: its name, and what choosing it means. A model the
# deployment configures (a remote service) is named by its id.
_EMBEDDING_NAMES = {
    E5_EMBEDDING_MODEL: (_("e5-small 多语言语义模型"), _("本地运行，中英文问题都能按意思检索")),
    LOCAL_EMBEDDING_MODEL: (_("词法哈希"), _("本地运行，只按字词匹配，不理解意思，适合测试")),
}


def embedding_model_name(model: str) -> str:
    """The model in a few words, for lists ("e5-small 多语言语义模型")."""
    known = _EMBEDDING_NAMES.get(model)
    return str(known[0]) if known else model


def embedding_model_label(model: str) -> str:
    """The model with what choosing it means, as the new-knowledge-base form offers it."""
    known = _EMBEDDING_NAMES.get(model)
    return _("%(name)s（%(note)s）") % {"name": known[0], "note": known[1]} if known else model


def embedding_model_choices() -> list[tuple[str, str]]:
    choices = []
    for index, (model, dimension) in enumerate(embedding_choices()):
        label = _("%(name)s · %(dim)s 维") % {"name": embedding_model_label(model), "dim": dimension}
        choices.append((model, _("%(label)s（部署默认）") % {"label": label} if index == 0 else label))
    return choices


class KnowledgeBaseAddForm(forms.ModelForm):
    """The new-knowledge-base form: the model fields plus the embedding model, which is fixed at
    creation because every vector of the base lives in its space."""

    # Not required: a post without it (a script) gets the deployment's default, as the service does.
    embedding_choice = forms.ChoiceField(
        label=_("向量模型"), required=False,
        help_text=_("创建后不能更改：更换向量模型需要新建知识库并重新导入文档。"),
    )

    class Meta:
        model = KnowledgeBase
        fields = "__all__"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields["embedding_choice"]
        field.choices = embedding_model_choices()
        field.initial = field.choices[0][0]


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        single = super().clean
        if isinstance(data, (list, tuple)):
            return [single(item, initial) for item in data]
        return [single(data, initial)]


class AttributesField(forms.JSONField):
    """A document's metadata edited as a JSON object, checked as every other writer checks it
    (`knowledge.attributes`), its problem said in the reader's words."""

    default_error_messages = {"invalid": _("元数据必须是 JSON 对象，例如 {\"部门\": \"人力资源部\"}。")}

    def __init__(self, **kwargs):
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 6, "cols": 80, "class": "vLargeTextField"}))
        super().__init__(**kwargs)

    def prepare_value(self, value):
        # Chinese keys and values as they are, one per line, rather than \u escapes on one line.
        if isinstance(value, dict):
            return json.dumps(value, ensure_ascii=False, indent=2)
        return super().prepare_value(value)

    def clean(self, value):
        value = super().clean(value)
        try:
            return clean_attributes({} if value is None else value)
        except InvalidAttributes as error:
            raise forms.ValidationError(str(error.message), code=error.code) from error


ATTRIBUTES_HELP = format_lazy(
    _("JSON 对象，如 {{\"部门\": \"人力资源部\", \"生效日期\": \"2025-01-01\"}}。值可以是文字、数字、布尔值或文字列表；"
      "最多 {keys} 个键，键最长 {chars} 个字符。检索、命中测试和问答可按这些字段筛选。"),
    keys=MAX_ATTRIBUTE_KEYS, chars=MAX_KEY_CHARS,
)


class DocumentAttributesForm(forms.ModelForm):
    """The one field of a document staff edit in the admin; the rest is derived and read-only."""

    attributes = AttributesField(label=_("自定义元数据"), required=False, help_text=ATTRIBUTES_HELP)

    class Meta:
        model = Document
        fields = ["attributes"]


class UploadDocumentsForm(forms.Form):
    knowledge_base = forms.ModelChoiceField(
        label=_("知识库"), queryset=KnowledgeBase.objects.order_by("name")
    )
    files = MultipleFileField(
        label=_("文件"),
        help_text=_("可多选。支持 PDF 文档，docx、xlsx、pptx 办公文档，csv 表格，Markdown、html、txt 文本，png、jpeg 图片。"),
    )
    source_tag = forms.CharField(label=_("来源标签"), max_length=100, required=False)
    attributes = AttributesField(
        label=_("自定义元数据"), required=False, initial=dict,
        help_text=format_lazy("{} {}", _("给本次上传的每个新文档；已存在的相同文件保留它自己的元数据。"), ATTRIBUTES_HELP),
    )

    def __init__(self, *args, knowledge_bases=None, **kwargs):
        super().__init__(*args, **kwargs)
        if knowledge_bases is not None:  # only those the uploader edits
            self.fields["knowledge_base"].queryset = knowledge_bases.order_by("name")
        # Empty files must reach the service, which refuses them with a clear, coded message.
        self.fields["files"].allow_empty_file = True


class SwitchVersionForm(forms.Form):
    reason = forms.CharField(
        label=_("原因"), widget=forms.Textarea(attrs={"rows": 3, "cols": 60}), required=True,
        help_text=_("记录在版本切换历史中，便于审计。"),
    )
    override_release_check = forms.BooleanField(
        label=_("上线检查未通过时仍然发布"), required=False,
        help_text=_("原因与检查结果会一起记录在版本切换历史中。"),
    )

    def __init__(self, *args, allow_override: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if not allow_override:
            del self.fields["override_release_check"]


class FAQForm(forms.ModelForm):
    similar_questions_text = forms.CharField(
        label=_("相似问题"), required=False, widget=forms.Textarea(attrs={"rows": 4, "cols": 60}),
        help_text=_("每行一个。"),
    )

    class Meta:
        model = FAQ
        fields = ["knowledge_base", "question", "answer", "source_tag", "enabled"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance and self.instance.pk:
            self.fields["similar_questions_text"].initial = "\n".join(self.instance.similar_questions)

    def similar_questions(self) -> list[str]:
        text = self.cleaned_data.get("similar_questions_text") or ""
        return [line.strip() for line in text.splitlines() if line.strip()]


def _lines(value: list[str] | None) -> str:
    return "\n".join(value or [])


class ItemForm(forms.ModelForm):
    aliases_text = forms.CharField(
        label=_("别名"), required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=_("每行一个，如 X3Pro、星河X3Pro。问题里写出任一名称都算指名这一款。"),
    )
    codes_text = forms.CharField(
        label=_("型号代码"), required=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text=_("每行一个，如 XH-X3P。"),
    )
    group_aliases_text = forms.CharField(
        label=_("系列别名"), required=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text=_("每行一个。问题只提到系列（如“星河路由器多少钱？”）时，会反问用户是哪一款。"),
    )

    class Meta:
        model = Item
        fields = ["knowledge_base", "name", "group", "description", "enabled"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance and self.instance.pk:
            self.fields["aliases_text"].initial = _lines(self.instance.aliases)
            self.fields["codes_text"].initial = _lines(self.instance.codes)
            self.fields["group_aliases_text"].initial = _lines(self.instance.group_aliases)

    def names(self, field: str) -> list[str]:
        return [line.strip() for line in (self.cleaned_data.get(field) or "").splitlines() if line.strip()]

    def clean(self):
        cleaned = super().clean()
        try:
            check_item_names(name=cleaned.get("name") or "", aliases=self.names("aliases_text"),
                             codes=self.names("codes_text"), group_aliases=self.names("group_aliases_text"))
        except ValidationFailed as error:
            raise forms.ValidationError(str(error.message), code=error.code) from error
        return cleaned


class ImportItemsForm(forms.Form):
    knowledge_base = forms.ModelChoiceField(label=_("知识库"), queryset=KnowledgeBase.objects.none())
    file = forms.FileField(
        label=_("文件"),
        help_text=_("CSV 或 XLSX，第一行为表头：名称、别名、型号代码、系列、系列别名、说明；一格多个名称用逗号或分号分隔。同名的会更新。"),
    )

    def __init__(self, *args, knowledge_bases, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["knowledge_base"].queryset = knowledge_bases


class ChunkItemForm(forms.ModelForm):
    class Meta:
        model = ChunkItem
        fields = ["chunk", "item", "source"]
        widgets = {"chunk": forms.NumberInput(attrs={"min": 1})}
        help_texts = {"source": _("人工标注：这个分块讲的是该商品；人工排除：虽然提到了该商品，但讲的不是它。")}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "source" in self.fields:  # a read-only view has no fields to offer
            self.fields["source"].choices = [(v, l) for v, l in TagSource.choices if v != TagSource.DETECTED]

    def clean(self):
        cleaned = super().clean()
        chunk, item = cleaned.get("chunk"), cleaned.get("item")
        if chunk is not None and item is not None and chunk.knowledge_base_id != item.knowledge_base_id:
            raise forms.ValidationError(_("分块与商品/型号不属于同一个知识库。"), code="invalid_item_tag")
        return cleaned
