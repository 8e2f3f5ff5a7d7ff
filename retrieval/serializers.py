"""Request validation for the retrieval API (seed 000 §2)."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from .contracts import MAX_CANDIDATE_K, MAX_DOCUMENT_IDS, MAX_QUESTION_CHARS, MAX_TOP_K, MODES


class RetrievalRequestInput(serializers.Serializer):
    knowledge_base_id = serializers.CharField(max_length=64)
    question = serializers.CharField(max_length=MAX_QUESTION_CHARS, trim_whitespace=True)
    top_k = serializers.IntegerField(min_value=1, max_value=MAX_TOP_K, default=5)
    mode = serializers.ChoiceField(choices=MODES, default="hybrid")
    candidate_k = serializers.IntegerField(min_value=1, max_value=MAX_CANDIDATE_K, default=30)
    enable_query_rewrite = serializers.BooleanField(default=False)
    enable_rerank = serializers.BooleanField(default=False)
    enable_parent_expansion = serializers.BooleanField(default=False)
    enable_hyde = serializers.BooleanField(default=False)
    dynamic_top_k = serializers.BooleanField(default=False)
    document_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1), required=False, allow_null=True,
        max_length=MAX_DOCUMENT_IDS, allow_empty=False,
        error_messages={"max_length": _("document_ids 最多 50 个。")},
    )

    def validate(self, data):
        if data["candidate_k"] < data["top_k"]:
            raise serializers.ValidationError({"candidate_k": _("candidate_k 不能小于 top_k。")})
        if data.get("document_ids"):
            data["document_ids"] = tuple(sorted(set(data["document_ids"])))
        else:
            data["document_ids"] = None
        return data
