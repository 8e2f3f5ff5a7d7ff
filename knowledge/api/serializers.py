"""Input validation and output shapes of the knowledge API. No workflows here: views call services."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from knowledge.access import Role, role_in
from knowledge.attributes import MAX_ATTRIBUTE_KEYS, clean_attributes
from knowledge.models import (
    FAQ,
    Document,
    KnowledgeBase,
    KnowledgeBaseVersion,
    VersionActivation,
    Visibility,
    slug_validator,
)


class EditorOnlyFields:
    """Fields only the knowledge base's editors see. Readers get null in their place, so there is
    one response shape (and one schema) for both. The view says who asks: context["editor"]."""

    editor_only: tuple[str, ...] = ()

    def shows_editor_fields(self, instance) -> bool:
        return bool(self.context.get("editor"))

    def to_representation(self, instance):
        data = super().to_representation(instance)
        if not self.shows_editor_fields(instance):
            for name in self.editor_only:
                data[name] = None
        return data


@extend_schema_field(serializers.ListField(child=serializers.CharField(), allow_null=True))
class GroupNamesField(serializers.Field):
    def __init__(self, **kwargs):
        super().__init__(read_only=True, **kwargs)

    def to_representation(self, manager):
        return sorted(group.name for group in manager.all())


class KnowledgeBaseOutput(EditorOnlyFields, serializers.ModelSerializer):
    id = serializers.CharField(source="slug")
    active_version = serializers.SerializerMethodField()
    allowed_groups = GroupNamesField()
    editor_groups = GroupNamesField()
    publisher_groups = GroupNamesField()
    role = serializers.SerializerMethodField(help_text=_("调用者在该知识库的角色：reader（读者）、editor（编辑者）或 publisher（发布者）。"))
    link_allowed_hosts = serializers.ListField(
        source="link_hosts", child=serializers.CharField(), read_only=True,
        help_text=_("答案中链接保持可点击的域名；其他链接显示为文本及其地址。"),
    )

    editor_only = (
        "allowed_groups", "editor_groups", "publisher_groups", "custom_terms", "release_max_regression_points",
    )

    class Meta:
        model = KnowledgeBase
        fields = [
            "id", "name", "description", "visibility", "allowed_groups", "editor_groups", "publisher_groups",
            "role", "support_contact", "embedding_model", "embedding_dimension", "text_analysis", "custom_terms",
            "chunk_size_tokens", "chunk_overlap_tokens", "release_max_regression_points", "link_allowed_hosts",
            "web_search_enabled", "active_version", "created_at", "updated_at",
        ]
        extra_kwargs = {"custom_terms": {"allow_null": True}}

    def get_active_version(self, kb: KnowledgeBase) -> int | None:
        return kb.active_version.number if kb.active_version_id else None

    def shows_editor_fields(self, kb: KnowledgeBase) -> bool:
        return role_in(self.context.get("user"), kb) >= Role.EDITOR

    @extend_schema_field(serializers.ChoiceField(choices=[role.name.lower() for role in Role if role]))
    def get_role(self, kb: KnowledgeBase) -> str:
        return role_in(self.context.get("user"), kb).name.lower()


class GroupNameInput(serializers.SlugRelatedField):
    """A group by name. A name with NUL is no group's, and PostgreSQL refuses it in the lookup
    (a 500): it is "does not exist" before the query."""

    def to_internal_value(self, data):
        if isinstance(data, str) and "\x00" in data:
            self.fail("does_not_exist", slug_name=self.slug_field, value=data.replace("\x00", ""))
        return super().to_internal_value(data)


class KnowledgeBaseCreateInput(serializers.Serializer):
    id = serializers.CharField(
        max_length=64, validators=[slug_validator],
        help_text=_("知识库标识（slug：字母、数字、连字符与下划线），其他接口的 `kb_id`。"),
    )
    name = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    visibility = serializers.ChoiceField(choices=Visibility.choices, default=Visibility.INTERNAL)
    allowed_groups = GroupNameInput(
        many=True, queryset=Group.objects.all(), slug_field="name", required=False, default=list
    )
    editor_groups = GroupNameInput(
        many=True, queryset=Group.objects.all(), slug_field="name", required=False, default=list
    )
    publisher_groups = GroupNameInput(
        many=True, queryset=Group.objects.all(), slug_field="name", required=False, default=list
    )
    support_contact = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    chunk_size_tokens = serializers.IntegerField(min_value=64, max_value=4096, default=512)
    chunk_overlap_tokens = serializers.IntegerField(min_value=0, max_value=1024, default=48)
    # Fixed once created; unset: the deployment's RAG_EMBEDDING_MODEL.
    embedding_model = serializers.CharField(
        max_length=100, required=False, default=None,
        help_text=_("向量模型，创建后不可更改；不传则使用部署的默认模型（RAG_EMBEDDING_MODEL）。"),
    )
    embedding_dimension = serializers.IntegerField(
        min_value=1, max_value=16384, required=False, default=None,
        help_text=_("向量维度，创建后不可更改；不传则使用该向量模型的维度。"),
    )
    custom_terms = serializers.CharField(required=False, allow_blank=True, default="", max_length=100_000)
    # Hosts whose links stay clickable in answers (`docs.example.com`, `*.example.com`); any
    # other link is shown as text with its address.
    link_allowed_hosts = serializers.ListField(
        child=serializers.CharField(max_length=253), required=False, max_length=200, default=list,
        help_text=_("答案中链接保持可点击的域名（如 `docs.example.com`、`*.example.com`），最多 200 个。"),
    )


class KnowledgeBaseUpdateInput(serializers.Serializer):
    name = serializers.CharField(max_length=200, required=False)
    description = serializers.CharField(required=False, allow_blank=True)
    visibility = serializers.ChoiceField(choices=Visibility.choices, required=False)
    allowed_groups = GroupNameInput(
        many=True, queryset=Group.objects.all(), slug_field="name", required=False
    )
    editor_groups = GroupNameInput(
        many=True, queryset=Group.objects.all(), slug_field="name", required=False
    )
    publisher_groups = GroupNameInput(
        many=True, queryset=Group.objects.all(), slug_field="name", required=False
    )
    support_contact = serializers.CharField(max_length=200, required=False, allow_blank=True)
    # A new dictionary applies to questions at once; POST …/reanalyse applies it to the index.
    custom_terms = serializers.CharField(
        required=False, allow_blank=True, max_length=100_000,
        help_text=_("领域词典，每行一个词；立即作用于提问，已入库的内容需调用 `POST …/reanalyse/`。"),
    )
    # null: show the release check on publish, never refuse.
    release_max_regression_points = serializers.FloatField(
        required=False, allow_null=True, min_value=0.0,
        help_text=_("上线检查允许的最大退步（百分点），超出即拒绝发布；`null` 表示只展示检查结果、不拦截。"
                    "需要发布者角色。"),
    )
    # Hosts whose links stay clickable in answers (`docs.example.com`, `*.example.com`); any
    # other link is shown as text with its address.
    link_allowed_hosts = serializers.ListField(
        child=serializers.CharField(max_length=253), required=False, max_length=200,
        help_text=_("答案中链接保持可点击的域名（如 `docs.example.com`、`*.example.com`），最多 200 个；"
                    "需要发布者角色。"),
    )
    # Questions then leave for a search service outside: the publisher's decision, as the audience is.
    web_search_enabled = serializers.BooleanField(
        required=False,
        help_text=_("问答是否同时检索互联网（需在部署中配置搜索服务）；需要发布者角色。"),
    )


class VersionOutput(EditorOnlyFields, serializers.ModelSerializer):
    document_count = serializers.IntegerField(source="documents.count", read_only=True)
    based_on = serializers.SerializerMethodField()

    class Meta:
        model = KnowledgeBaseVersion
        fields = [
            "number", "label", "notes", "status", "document_count", "based_on",
            "created_at", "ready_at", "activated_at", "retired_at",
        ]
        extra_kwargs = {"notes": {"allow_null": True}}

    editor_only = ("notes",)

    def get_based_on(self, version: KnowledgeBaseVersion) -> int | None:
        return version.based_on.number if version.based_on_id else None


class VersionDetailOutput(VersionOutput):
    document_ids = serializers.PrimaryKeyRelatedField(source="documents", many=True, read_only=True)

    class Meta(VersionOutput.Meta):
        fields = VersionOutput.Meta.fields + ["document_ids"]


class VersionCreateInput(serializers.Serializer):
    label = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    notes = serializers.CharField(required=False, allow_blank=True, default="")


class SwitchInput(serializers.Serializer):
    reason = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=2000, help_text=_("原因，记入发布记录。"),
    )


class ActivateInput(SwitchInput):
    override_release_check = serializers.BooleanField(
        required=False, default=False,
        help_text=_("上线检查拒绝时仍然发布（必须填写 `reason`；记入发布记录）。"),
    )


class ActivationOutput(serializers.ModelSerializer):
    from_version = serializers.IntegerField(source="from_version.number", allow_null=True, default=None)
    to_version = serializers.IntegerField(source="to_version.number")
    actor = serializers.CharField(source="actor.get_username", default=None)

    class Meta:
        model = VersionActivation
        fields = ["action", "from_version", "to_version", "actor", "reason", "release_check", "cache_epoch", "created_at"]


@extend_schema_field({
    "type": "object", "maxProperties": MAX_ATTRIBUTE_KEYS,
    "additionalProperties": {"oneOf": [
        {"type": "string"}, {"type": "number"}, {"type": "boolean"},
        {"type": "array", "items": {"type": "string"}},
    ]},
    "example": {"部门": "人力资源部", "生效日期": "2025-01-01", "地区": ["华东", "华南"]},
})
class AttributesField(serializers.Field):
    """Staff's metadata of a document: a JSON object (or, in a multipart body, its JSON text) of
    keys to a string, number, boolean or list of strings (`knowledge.attributes`). A value that
    does not fit is refused whole with `invalid_attributes` naming the first problem."""

    def to_internal_value(self, data):
        return clean_attributes(data)

    def to_representation(self, value):
        return value


class DocumentOutput(EditorOnlyFields, serializers.ModelSerializer):
    status_label = serializers.CharField(source="get_status_display", read_only=True)
    attributes = AttributesField(read_only=True, help_text=_("文档的元数据，检索与问答可按它过滤。"))

    # Fingerprints and failure details are for the people who maintain the knowledge base.
    editor_only = ("sha256", "error_code", "error_message", "attempts")

    class Meta:
        model = Document
        fields = [
            "id", "title", "original_name", "file_type", "mime_type", "sha256", "size",
            "source_tag", "external_id", "status", "status_label", "error_code", "error_message",
            "attempts", "page_count", "chunk_count", "embedded_chunks", "chunks_to_embed", "attributes",
            "created_at", "updated_at",
        ]
        extra_kwargs = {name: {"allow_null": True} for name in ("sha256", "error_code", "error_message", "attempts")}


class DocumentUploadInput(serializers.Serializer):
    files = serializers.ListField(
        child=serializers.FileField(allow_empty_file=True), allow_empty=False,
        error_messages={"empty": _("请至少选择一个文件。")},
        help_text=_("要上传的文件（可多个）；支持 PDF、DOCX、XLSX、CSV、PPTX、Markdown、HTML、TXT、PNG、JPEG。"),
    )
    source_tag = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    attributes = AttributesField(
        required=False, default=dict,
        help_text=_('本次上传的每个新文档的元数据：一个 JSON 对象的文本，如 '
                    '`{"部门": "人力资源部", "生效日期": "2025-01-01"}`。已存在的文件保留它自己的元数据。'),
    )


class DocumentUpdateInput(serializers.Serializer):
    attributes = AttributesField(
        required=False,
        help_text=_("整体替换文档的元数据（`{}` 表示清空；不传则不变），检索过滤立即按新值生效。"),
    )


class UploadOutcomeOutput(serializers.Serializer):
    document = DocumentOutput()
    duplicate = serializers.BooleanField(help_text=_("内容相同的文档已存在：返回的是已有文档，本次未重复入库。"))


class FAQOutput(EditorOnlyFields, serializers.ModelSerializer):
    editor_only = ("hit_count",)

    class Meta:
        model = FAQ
        fields = [
            "id", "question", "similar_questions", "answer", "source_tag", "enabled",
            "hit_count", "created_at", "updated_at",
        ]
        extra_kwargs = {"hit_count": {"allow_null": True}}


class FAQInput(serializers.Serializer):
    question = serializers.CharField(max_length=500)
    similar_questions = serializers.ListField(
        child=serializers.CharField(max_length=500), required=False, default=list, max_length=49,
        help_text=_("同一问题的其他问法，最多 49 个，与标准问题一样参与匹配。"),
    )
    answer = serializers.CharField(help_text=_("答案（Markdown）。"))
    source_tag = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    enabled = serializers.BooleanField(required=False, default=True, help_text=_("停用的 FAQ 不参与问答，读者也看不到。"))


class DocumentDeletionOutput(serializers.Serializer):
    removed_from_draft = serializers.BooleanField(help_text=_("文档已从草稿版本中移除。"))
    purged = serializers.BooleanField(help_text=_("是否已彻底删除：不再被任何保留版本包含时，文件、分块与向量都被删除。"))
    retained_by_versions = serializers.ListField(child=serializers.IntegerField(), help_text=_("仍包含该文档的版本号。"))


class CacheInvalidateInput(serializers.Serializer):
    knowledge_base_id = serializers.CharField(max_length=64, help_text=_("知识库标识。"))


class CacheInvalidateOutput(serializers.Serializer):
    knowledge_base_id = serializers.CharField()
    cache_epoch = serializers.IntegerField(help_text=_("新的缓存代次；更早代次的缓存不再使用。"))
