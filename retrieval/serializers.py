"""Request validation for the retrieval API (seed 000 §2) and the retrieval options of chat."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from .contracts import FUSIONS, MAX_CANDIDATE_K, MAX_DOCUMENT_IDS, MAX_QUESTION_CHARS, MAX_TOP_K, MODES


class RetrievalOptionsInput(serializers.Serializer):
    """The options of one retrieval, as the retrieval and chat endpoints take them. Unset
    options are None after validation unless the endpoint has a default for them (`DEFAULTS`);
    chat's defaults live in its rules file."""

    DEFAULTS: dict = {}

    top_k = serializers.IntegerField(min_value=1, max_value=MAX_TOP_K, required=False)
    mode = serializers.ChoiceField(choices=MODES, required=False)
    candidate_k = serializers.IntegerField(min_value=1, max_value=MAX_CANDIDATE_K, required=False)
    enable_query_rewrite = serializers.BooleanField(required=False, allow_null=True, default=None)
    enable_rerank = serializers.BooleanField(required=False, allow_null=True, default=None)
    enable_parent_expansion = serializers.BooleanField(required=False, allow_null=True, default=None)
    document_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1), required=False, allow_null=True,
        max_length=MAX_DOCUMENT_IDS, allow_empty=False,
        error_messages={"max_length": _("document_ids 最多 50 个。")},
    )

    def validate(self, data):
        for name, default in self.DEFAULTS.items():
            if data.get(name) is None:
                data[name] = default
        top_k, candidate_k = data.get("top_k"), data.get("candidate_k")
        if top_k is not None and candidate_k is not None and candidate_k < top_k:
            raise serializers.ValidationError({"candidate_k": _("candidate_k 不能小于 top_k。")})
        ids = data.get("document_ids")
        data["document_ids"] = tuple(sorted(set(ids))) if ids else None
        return data


class RetrievalRequestInput(RetrievalOptionsInput):
    DEFAULTS = {
        "top_k": 5, "mode": "hybrid", "candidate_k": 30, "enable_query_rewrite": False,
        "enable_rerank": False, "enable_parent_expansion": False,
    }

    knowledge_base_id = serializers.CharField(max_length=64)
    question = serializers.CharField(max_length=MAX_QUESTION_CHARS, trim_whitespace=True)
    enable_hyde = serializers.BooleanField(default=False)
    dynamic_top_k = serializers.BooleanField(default=False)
    # How hybrid merges its channels; unset: the deployment's RAG_FUSION (convex by default).
    fusion = serializers.ChoiceField(choices=FUSIONS, required=False)
