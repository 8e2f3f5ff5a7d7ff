"""Input validation and output shapes of the knowledge API. No workflows here: views call services."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from ..models import (
    FAQ,
    Document,
    KnowledgeBase,
    KnowledgeBaseVersion,
    VersionActivation,
    Visibility,
    slug_validator,
)


class KnowledgeBaseOutput(serializers.ModelSerializer):
    id = serializers.CharField(source="slug")
    active_version = serializers.SerializerMethodField()
    allowed_groups = serializers.SlugRelatedField(many=True, read_only=True, slug_field="name")

    class Meta:
        model = KnowledgeBase
        fields = [
            "id", "name", "description", "visibility", "allowed_groups", "support_contact",
            "embedding_model", "embedding_dimension", "text_analysis", "custom_terms",
            "chunk_size_tokens", "chunk_overlap_tokens", "release_max_regression_points", "active_version",
            "created_at", "updated_at",
        ]

    def get_active_version(self, kb: KnowledgeBase) -> int | None:
        return kb.active_version.number if kb.active_version_id else None


class KnowledgeBaseCreateInput(serializers.Serializer):
    id = serializers.CharField(max_length=64, validators=[slug_validator])
    name = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    visibility = serializers.ChoiceField(choices=Visibility.choices, default=Visibility.INTERNAL)
    allowed_groups = serializers.SlugRelatedField(
        many=True, queryset=Group.objects.all(), slug_field="name", required=False, default=list
    )
    support_contact = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    chunk_size_tokens = serializers.IntegerField(min_value=64, max_value=4096, default=512)
    chunk_overlap_tokens = serializers.IntegerField(min_value=0, max_value=1024, default=48)
    # Fixed once created; unset: the deployment's RAG_EMBEDDING_MODEL.
    embedding_model = serializers.CharField(max_length=100, required=False, default=None)
    embedding_dimension = serializers.IntegerField(min_value=1, max_value=16384, required=False, default=None)
    custom_terms = serializers.CharField(required=False, allow_blank=True, default="", max_length=100_000)


class KnowledgeBaseUpdateInput(serializers.Serializer):
    name = serializers.CharField(max_length=200, required=False)
    description = serializers.CharField(required=False, allow_blank=True)
    visibility = serializers.ChoiceField(choices=Visibility.choices, required=False)
    allowed_groups = serializers.SlugRelatedField(
        many=True, queryset=Group.objects.all(), slug_field="name", required=False
    )
    support_contact = serializers.CharField(max_length=200, required=False, allow_blank=True)
    # A new dictionary applies to questions at once; POST …/reanalyse applies it to the index.
    custom_terms = serializers.CharField(required=False, allow_blank=True, max_length=100_000)
    # null: show the release check on publish, never refuse.
    release_max_regression_points = serializers.FloatField(required=False, allow_null=True, min_value=0.0)


class VersionOutput(serializers.ModelSerializer):
    document_count = serializers.IntegerField(source="documents.count", read_only=True)
    based_on = serializers.SerializerMethodField()

    class Meta:
        model = KnowledgeBaseVersion
        fields = [
            "number", "label", "notes", "status", "document_count", "based_on",
            "created_at", "ready_at", "activated_at", "retired_at",
        ]

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
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class ActivateInput(SwitchInput):
    override_release_check = serializers.BooleanField(
        required=False, default=False,
        help_text="Publish although the release check refused the draft (needs a reason; logged).",
    )


class ActivationOutput(serializers.ModelSerializer):
    from_version = serializers.IntegerField(source="from_version.number", allow_null=True, default=None)
    to_version = serializers.IntegerField(source="to_version.number")
    actor = serializers.CharField(source="actor.get_username", default=None)

    class Meta:
        model = VersionActivation
        fields = ["action", "from_version", "to_version", "actor", "reason", "release_check", "cache_epoch", "created_at"]


class DocumentOutput(serializers.ModelSerializer):
    status_label = serializers.CharField(source="get_status_display", read_only=True)

    class Meta:
        model = Document
        fields = [
            "id", "title", "original_name", "file_type", "mime_type", "sha256", "size",
            "source_tag", "external_id", "status", "status_label", "error_code", "error_message",
            "attempts", "page_count", "chunk_count", "created_at", "updated_at",
        ]


class DocumentUploadInput(serializers.Serializer):
    files = serializers.ListField(
        child=serializers.FileField(allow_empty_file=True), allow_empty=False,
        error_messages={"empty": _("请至少选择一个文件。")},
    )
    source_tag = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")


class UploadOutcomeOutput(serializers.Serializer):
    document = DocumentOutput()
    duplicate = serializers.BooleanField()


class FAQOutput(serializers.ModelSerializer):
    class Meta:
        model = FAQ
        fields = [
            "id", "question", "similar_questions", "answer", "source_tag", "enabled",
            "hit_count", "created_at", "updated_at",
        ]


class FAQInput(serializers.Serializer):
    question = serializers.CharField(max_length=500)
    similar_questions = serializers.ListField(
        child=serializers.CharField(max_length=500), required=False, default=list, max_length=49
    )
    answer = serializers.CharField()
    source_tag = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    enabled = serializers.BooleanField(required=False, default=True)
