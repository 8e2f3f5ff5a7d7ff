"""Request validation for the retrieval API and the retrieval options of chat."""

from __future__ import annotations

from django.conf import settings
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ragsite.errors import Forbidden
from ragsite.openapi import ChannelErrorOutput

from .contracts import BUILTIN_FILTER_FIELDS, FILTER_OPS, FUSIONS, MAX_CANDIDATE_K, MAX_DOCUMENT_IDS, MAX_FILTERS, MAX_TOP_K, MODES
from .filters import parse_filters

MAX_ID = 2**63 - 1  # a BigAutoField's largest key, on PostgreSQL and SQLite


class MetadataFilterInput(serializers.Serializer):
    """The schema of one metadata filter (`retrieval.filters`), e.g.
    {"field": "部门", "op": "eq", "value": "人力资源部"},
    {"field": "file_type", "op": "in", "value": ["pdf", "docx"]},
    {"field": "生效日期", "op": "range", "gte": "2025-01-01", "lte": "2025-12-31"}."""

    field = serializers.CharField(
        max_length=80,
        help_text=f"A built-in ({', '.join(BUILTIN_FILTER_FIELDS)}) or a key of the documents' attributes, "
                  'bare or as "attributes.<key>" (needed only for a key named like a built-in).',
    )
    op = serializers.ChoiceField(choices=FILTER_OPS, help_text="eq: equals (a list attribute: holds it); "
                                 "in: one of up to 50 values; range: gte / lte, inclusive.")
    value = serializers.JSONField(
        required=False,
        help_text="eq: a string, number or boolean (an ISO date for created_at / updated_at, an item's name "
                  "for item); in: a list of those.",
    )
    gte = serializers.JSONField(required=False, help_text="range: a number or an ISO date (YYYY-MM-DD).")
    lte = serializers.JSONField(required=False, help_text="range: a number or an ISO date (YYYY-MM-DD).")


@extend_schema_field(MetadataFilterInput(many=True))
class MetadataFiltersField(serializers.Field):
    """Metadata filters, all of which a document must meet: a JSON list of filter objects (in a
    form or multipart body, its JSON text). A bad one is refused with `invalid_filter` naming it."""

    def __init__(self, **kwargs):
        kwargs.setdefault("help_text", f"At most {MAX_FILTERS}, all must hold; resolved over the READY "
                                       "documents like document_ids, and shown in the trace.")
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        return parse_filters(data)

    def to_representation(self, value):
        return [f.as_dict() for f in value]


class RetrievalOptionsInput(serializers.Serializer):
    """The options of one retrieval, as the retrieval and chat endpoints take them. Unset
    options are None after validation unless the endpoint has a default for them (`DEFAULTS`);
    chat's defaults live in its rules file."""

    DEFAULTS: dict = {}
    # Options that cost model calls (rewrite, rerank, HyDE) or more candidates per request: an
    # anonymous caller gets the endpoint's defaults and no more (403 `option_requires_login`),
    # so a public knowledge base cannot be made to spend the operator's model budget at will.
    # The serializer's context says who asks (`user`); without one nothing is checked.
    COSTLY_FLAGS: tuple[str, ...] = ("enable_query_rewrite", "enable_rerank")

    top_k = serializers.IntegerField(min_value=1, max_value=MAX_TOP_K, required=False)
    mode = serializers.ChoiceField(choices=MODES, required=False)
    candidate_k = serializers.IntegerField(min_value=1, max_value=MAX_CANDIDATE_K, required=False)
    enable_query_rewrite = serializers.BooleanField(required=False, allow_null=True, default=None)
    enable_rerank = serializers.BooleanField(required=False, allow_null=True, default=None)
    enable_parent_expansion = serializers.BooleanField(required=False, allow_null=True, default=None)
    document_ids = serializers.ListField(
        # Bounded like the primary keys: a larger number made the facts query itself fail (a 500).
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID), required=False, allow_null=True,
        max_length=MAX_DOCUMENT_IDS, allow_empty=False,
        error_messages={"max_length": _("document_ids 最多 50 个。")},
    )
    filters = MetadataFiltersField(required=False, allow_null=True)

    def validate(self, data):
        for name, default in self.DEFAULTS.items():
            if data.get(name) is None:
                data[name] = default
        top_k, candidate_k = data.get("top_k"), data.get("candidate_k")
        if top_k is not None and candidate_k is not None and candidate_k < top_k:
            raise serializers.ValidationError({"candidate_k": _("candidate_k 不能小于 top_k。")})
        ids = data.get("document_ids")
        data["document_ids"] = tuple(sorted(set(ids))) if ids else None
        data["filters"] = data.get("filters") or ()
        self._check_costly_options(data)
        return data

    def anonymous_limits(self) -> dict:
        """What an anonymous caller may ask for: each flag of COSTLY_FLAGS (True: allowed) and
        `candidate_k`, the most candidates (top_k included) per request."""
        return {**{flag: bool(self.DEFAULTS.get(flag)) for flag in self.COSTLY_FLAGS},
                "candidate_k": self.DEFAULTS.get("candidate_k", MAX_CANDIDATE_K)}

    def _check_costly_options(self, data) -> None:
        if "user" not in self.context:
            return
        user = self.context["user"]
        if user is not None and user.is_authenticated:
            return
        limits = self.anonymous_limits()
        refused = [flag for flag in self.COSTLY_FLAGS if data.get(flag) and not limits[flag]]
        most = limits["candidate_k"]
        refused += [name for name in ("candidate_k", "top_k") if (data.get(name) or 0) > most]
        if refused:
            raise Forbidden(
                _("登录后才能使用这些选项：%(options)s。") % {"options": ", ".join(refused)},
                code="option_requires_login", options=refused,
            )


class RetrievalRequestInput(RetrievalOptionsInput):
    DEFAULTS = {
        "top_k": 5, "mode": "hybrid", "candidate_k": 30, "enable_query_rewrite": False,
        "enable_rerank": False, "enable_parent_expansion": False,
    }
    COSTLY_FLAGS = (*RetrievalOptionsInput.COSTLY_FLAGS, "enable_hyde")

    knowledge_base_id = serializers.CharField(max_length=64)
    question = serializers.CharField(trim_whitespace=True)
    enable_hyde = serializers.BooleanField(default=False)
    dynamic_top_k = serializers.BooleanField(default=False)
    # How hybrid merges its channels; unset: the deployment's RAG_FUSION (convex by default).
    fusion = serializers.ChoiceField(choices=FUSIONS, required=False)

    def validate_question(self, value: str) -> str:
        most = settings.RAG_MAX_QUESTION_CHARS
        if len(value) > most:
            raise serializers.ValidationError(_("问题过长（最多 %(n)s 个字符）。") % {"n": most}, code="max_length")
        return value


# --- response shapes (what `RetrievalResponse.as_dict()` and its parts produce) -------------------
# (Channel errors have the same shape in a trace and in a retrieval error: ragsite.openapi's.)


class AssetOutput(serializers.Serializer):
    id = serializers.IntegerField()
    document_id = serializers.IntegerField()
    page = serializers.IntegerField(allow_null=True)
    bbox = serializers.ListField(child=serializers.FloatField())
    width = serializers.IntegerField()
    height = serializers.IntegerField()
    caption = serializers.CharField(allow_blank=True)
    url = serializers.CharField(help_text="GET /api/assets/{id}: the image, permission-checked.")


class RetrievalResultOutput(serializers.Serializer):
    chunk_id = serializers.IntegerField(help_text="The chunk that matched; citations anchor here.")
    document_id = serializers.IntegerField()
    document_title = serializers.CharField(allow_blank=True)
    matched_content = serializers.CharField(allow_blank=True, help_text="The matched chunk's own text.")
    content = serializers.CharField(allow_blank=True, help_text="What an answer reads (parent-expanded when asked).")
    context_chunk_ids = serializers.ListField(child=serializers.IntegerField())
    score = serializers.FloatField(help_text="Ranking score; compare only within one response.")
    rank_sources = serializers.ListField(child=serializers.CharField(), help_text='e.g. "dense:original".')
    content_type = serializers.CharField()
    content_types = serializers.ListField(child=serializers.CharField())
    assets = AssetOutput(many=True)
    locator = serializers.DictField(help_text="Where in the document: page, bbox, sheet, slide, heading…")
    heading_path = serializers.ListField(child=serializers.CharField())
    parent_id = serializers.CharField(allow_blank=True)
    fusion_score = serializers.FloatField(allow_null=True)
    rerank_score = serializers.FloatField(allow_null=True)
    preview_url = serializers.CharField(allow_null=True, help_text="PNG of the chunk's PDF region, when it has one.")
    relevance = serializers.FloatField(min_value=0.0, max_value=1.0, help_text="Comparable across questions.")
    semantic_relevance = serializers.FloatField(
        min_value=0.0, max_value=1.0, allow_null=True,
        help_text="The calibrated dense part of relevance alone; null without a calibrated embedder.",
    )
    kb_id = serializers.IntegerField(help_text="The knowledge base the chunk belongs to (0: a web result).")
    source_kind = serializers.ChoiceField(
        choices=["kb", "web"], help_text='"web": a page a web search found (negative chunk_id, no document).'
    )
    url = serializers.CharField(allow_blank=True, help_text="A web result's page.")
    site = serializers.CharField(allow_blank=True, help_text="A web result's site (host name).")


class StageTimingOutput(serializers.Serializer):
    stage = serializers.CharField()
    elapsed_ms = serializers.FloatField()


class CacheEventOutput(serializers.Serializer):
    stage = serializers.CharField()
    hit = serializers.BooleanField()
    source_type = serializers.CharField()


class CacheSummaryOutput(serializers.Serializer):
    enabled = serializers.BooleanField()
    hit_count = serializers.IntegerField()
    miss_count = serializers.IntegerField()
    events = CacheEventOutput(many=True)


class KbScopeTraceOutput(serializers.Serializer):
    kb_id = serializers.IntegerField()
    version = serializers.IntegerField(allow_null=True)
    cache_epoch = serializers.IntegerField(allow_null=True)
    ready_document_count = serializers.IntegerField()
    empty_reason = serializers.CharField(allow_blank=True)


class MetadataFilterOutput(serializers.Serializer):
    field = serializers.CharField(help_text='Canonical: a built-in, or "attributes.<key>".')
    op = serializers.ChoiceField(choices=FILTER_OPS)
    value = serializers.JSONField(required=False)
    gte = serializers.JSONField(required=False)
    lte = serializers.JSONField(required=False)


class HydeTraceOutput(serializers.Serializer):
    status = serializers.ChoiceField(choices=["ran", "empty", "failed"])
    ran = serializers.BooleanField(help_text="A hypothetical answer was written and searched with.")
    model = serializers.CharField(allow_blank=True)
    elapsed_ms = serializers.FloatField(help_text="The chat model's completion alone.")
    hypothesis_chars = serializers.IntegerField(help_text="Length of the hypothetical answer (the text is not kept).")
    embedded = serializers.CharField(help_text='What was embedded: "question+hypothesis".')
    error = serializers.CharField(allow_blank=True)


class DynamicTopKTraceOutput(serializers.Serializer):
    kept = serializers.IntegerField()
    max_k = serializers.IntegerField()
    scored = serializers.IntegerField(help_text="Reranked candidates the cut looked at.")
    cut_index = serializers.IntegerField(allow_null=True, help_text="0-based index of the first result dropped.")
    score_before = serializers.FloatField(allow_null=True)
    score_after = serializers.FloatField(allow_null=True)
    cliff = serializers.CharField(allow_blank=True, help_text='"relative", "absolute" or "" (no cliff).')


class RetrievalTraceOutput(serializers.Serializer):
    kb_id = serializers.IntegerField()
    embedding_model = serializers.CharField(allow_blank=True)
    fusion = serializers.CharField(allow_blank=True)
    version = serializers.IntegerField(allow_null=True)
    cache_epoch = serializers.IntegerField(allow_null=True)
    mode = serializers.CharField()
    query_variants = serializers.ListField(child=serializers.CharField())
    ready_document_count = serializers.IntegerField()
    document_filter = serializers.CharField()
    candidate_counts = serializers.DictField(child=serializers.IntegerField())
    stage_timings_ms = StageTimingOutput(many=True)
    channel_errors = ChannelErrorOutput(many=True)
    degradations = serializers.ListField(child=serializers.CharField())
    cache = CacheSummaryOutput()
    empty_reason = serializers.CharField(allow_blank=True)
    total_ms = serializers.FloatField()
    notes = serializers.ListField(child=serializers.CharField())
    knowledge_bases = KbScopeTraceOutput(
        many=True, required=False, help_text="Each knowledge base of a question over several, the asked one first."
    )
    filters = MetadataFilterOutput(many=True, required=False, help_text="The metadata filters applied (when given).")
    filter_admitted_count = serializers.IntegerField(
        required=False, help_text="With filters: the READY documents they admitted (what was searched)."
    )
    filter_ready_count = serializers.IntegerField(required=False, help_text="With filters: the READY documents before them.")
    hyde = HydeTraceOutput(allow_null=True, help_text="The HyDE channel; null when it was not asked for or unavailable.")
    dynamic_top_k = DynamicTopKTraceOutput(
        allow_null=True, help_text="The cut after rerank; null when the fixed top_k applied."
    )


class ExplainOutput(serializers.Serializer):
    results = RetrievalResultOutput(many=True)
    trace = RetrievalTraceOutput()
