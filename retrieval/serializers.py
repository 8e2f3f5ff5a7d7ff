"""Request validation for the retrieval API and the retrieval options of chat."""

from __future__ import annotations

from django.conf import settings
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from engines.lexical import visible_text
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
        help_text=format_lazy(
            _("内置字段（{fields}）或文档元数据的键，可直接写键名或写成 \"attributes.<键>\"（仅当键名与内置字段同名时需要）。"),
            fields=", ".join(BUILTIN_FILTER_FIELDS),
        ),
    )
    op = serializers.ChoiceField(choices=FILTER_OPS, help_text=_(
        "eq：等于（列表型元数据：包含该值）；in：等于最多 50 个值之一；range：介于 gte 与 lte 之间（含端点）。"
    ))
    value = serializers.JSONField(
        required=False,
        help_text=_("eq：字符串、数字或布尔值（created_at / updated_at 用 ISO 日期，item 用商品名称）；"
                    "in：这些值的列表。"),
    )
    gte = serializers.JSONField(required=False, help_text=_("range 的下界：数字或 ISO 日期（YYYY-MM-DD）。"))
    lte = serializers.JSONField(required=False, help_text=_("range 的上界：数字或 ISO 日期（YYYY-MM-DD）。"))


@extend_schema_field(MetadataFilterInput(many=True))
class MetadataFiltersField(serializers.Field):
    """Metadata filters, all of which a document must meet: a JSON list of filter objects (in a
    form or multipart body, its JSON text). A bad one is refused with `invalid_filter` naming it."""

    def __init__(self, **kwargs):
        kwargs.setdefault("help_text", format_lazy(
            _("元数据过滤条件，最多 {n} 个，须全部满足；与 document_ids 一样在就绪文档中求交，并记入检索追踪。"
              "例如 `{{\"field\": \"部门\", \"op\": \"eq\", \"value\": \"人力资源部\"}}`。"),
            n=MAX_FILTERS,
        ))
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

    top_k = serializers.IntegerField(
        min_value=1, max_value=MAX_TOP_K, required=False, help_text=_("返回的证据条数。"),
    )
    mode = serializers.ChoiceField(
        choices=MODES, required=False,
        help_text=_("dense：向量检索；sparse：关键词检索；hybrid：两者融合。"),
    )
    candidate_k = serializers.IntegerField(
        min_value=1, max_value=MAX_CANDIDATE_K, required=False,
        help_text=_("每个检索通道取的候选数，不能小于 top_k。"),
    )
    enable_query_rewrite = serializers.BooleanField(
        required=False, allow_null=True, default=None,
        help_text=_("用聊天模型改写问题，再用改写结果一并检索（耗费模型调用）。"),
    )
    enable_rerank = serializers.BooleanField(
        required=False, allow_null=True, default=None, help_text=_("用重排模型为候选重新排序（耗费模型调用）。"),
    )
    enable_parent_expansion = serializers.BooleanField(
        required=False, allow_null=True, default=None,
        help_text=_("把命中的子块扩展为其所在的父块，给答案更完整的上下文。"),
    )
    document_ids = serializers.ListField(
        # Bounded like the primary keys: a larger number made the facts query itself fail (a 500).
        child=serializers.IntegerField(min_value=1, max_value=MAX_ID), required=False, allow_null=True,
        max_length=MAX_DOCUMENT_IDS, allow_empty=False,
        error_messages={"max_length": _("document_ids 最多 50 个。")},
        help_text=_("只在这些文档中检索（最多 50 个文档 ID）。"),
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

    knowledge_base_id = serializers.CharField(max_length=64, help_text=_("知识库标识。"))
    question = serializers.CharField(
        trim_whitespace=True, help_text=_("问题文本，长度不超过 RAG_MAX_QUESTION_CHARS。"),
    )
    enable_hyde = serializers.BooleanField(
        default=False, help_text=_("另用聊天模型写出的假设答案检索（HyDE，耗费模型调用）。"),
    )
    dynamic_top_k = serializers.BooleanField(
        default=False, help_text=_("按重排分数的明显落差决定返回条数（需要重排）。"),
    )
    # How hybrid merges its channels; unset: the deployment's RAG_FUSION (convex by default).
    fusion = serializers.ChoiceField(
        choices=FUSIONS, required=False,
        help_text=_("混合检索的融合方式：convex（加权）或 rrf（倒数排名融合）；不传则用部署的默认值。"),
    )

    def validate_question(self, value: str) -> str:
        # As a chat turn reads it: a BOM or zero-width spaces alone are no question.
        value = visible_text(value)
        if not value:
            raise serializers.ValidationError(_("问题不能为空。"), code="blank")
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
    url = serializers.CharField(help_text=_("图片地址（GET /api/assets/{id}），按读取权限校验。"))


class RetrievalResultOutput(serializers.Serializer):
    chunk_id = serializers.IntegerField(help_text=_("命中的分块，引用定位到这里。"))
    document_id = serializers.IntegerField()
    document_title = serializers.CharField(allow_blank=True)
    matched_content = serializers.CharField(allow_blank=True, help_text=_("命中分块本身的文本。"))
    content = serializers.CharField(allow_blank=True, help_text=_("答案读取的文本（要求父块扩展时为父块）。"))
    context_chunk_ids = serializers.ListField(child=serializers.IntegerField())
    score = serializers.FloatField(help_text=_("排序分数，只在同一次响应内可比。"))
    rank_sources = serializers.ListField(
        child=serializers.CharField(), help_text=_("找到它的检索通道，如 \"dense:original\"。"),
    )
    content_type = serializers.CharField()
    content_types = serializers.ListField(child=serializers.CharField())
    assets = AssetOutput(many=True)
    locator = serializers.DictField(help_text=_("在文档中的位置：页码、区域、工作表、幻灯片、标题……"))
    heading_path = serializers.ListField(child=serializers.CharField())
    parent_id = serializers.CharField(allow_blank=True)
    fusion_score = serializers.FloatField(allow_null=True)
    rerank_score = serializers.FloatField(allow_null=True)
    preview_url = serializers.CharField(allow_null=True, help_text=_("分块在 PDF 页面上的区域预览图（PNG）地址；没有时为 null。"))
    relevance = serializers.FloatField(min_value=0.0, max_value=1.0, help_text=_("相关度（0–1），不同问题之间可比。"))
    semantic_relevance = serializers.FloatField(
        min_value=0.0, max_value=1.0, allow_null=True,
        help_text=_("仅相关度中经过校准的向量部分；向量模型未校准时为 null。"),
    )
    kb_id = serializers.IntegerField(help_text=_("分块所属知识库的内部 ID（0 表示联网搜索结果）。"))
    source_kind = serializers.ChoiceField(
        choices=["kb", "web"], help_text=_("\"web\"：联网搜索找到的网页（chunk_id 为负数，没有文档）。")
    )
    url = serializers.CharField(allow_blank=True, help_text=_("联网搜索结果的网页地址。"))
    site = serializers.CharField(allow_blank=True, help_text=_("联网搜索结果的网站（主机名）。"))


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
    field = serializers.CharField(help_text=_("规范形式：内置字段，或 \"attributes.<键>\"。"))
    op = serializers.ChoiceField(choices=FILTER_OPS)
    value = serializers.JSONField(required=False)
    gte = serializers.JSONField(required=False)
    lte = serializers.JSONField(required=False)


class HydeTraceOutput(serializers.Serializer):
    status = serializers.ChoiceField(choices=["ran", "empty", "failed"])
    ran = serializers.BooleanField(help_text=_("是否写出了假设答案并用它检索。"))
    model = serializers.CharField(allow_blank=True)
    elapsed_ms = serializers.FloatField(help_text=_("仅聊天模型生成假设答案的耗时。"))
    hypothesis_chars = serializers.IntegerField(help_text=_("假设答案的长度（不保存其文本）。"))
    embedded = serializers.CharField(help_text=_("被向量化的内容：\"question+hypothesis\"。"))
    error = serializers.CharField(allow_blank=True)


class DynamicTopKTraceOutput(serializers.Serializer):
    kept = serializers.IntegerField()
    max_k = serializers.IntegerField()
    scored = serializers.IntegerField(help_text=_("截断时考察的重排候选数。"))
    cut_index = serializers.IntegerField(allow_null=True, help_text=_("第一个被舍弃的结果的下标（从 0 开始）。"))
    score_before = serializers.FloatField(allow_null=True)
    score_after = serializers.FloatField(allow_null=True)
    cliff = serializers.CharField(allow_blank=True, help_text=_("\"relative\"、\"absolute\" 或 \"\"（没有明显落差）。"))


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
        many=True, required=False, help_text=_("同时检索多个知识库时的每个知识库，提问的那个在前。")
    )
    filters = MetadataFilterOutput(many=True, required=False, help_text=_("实际应用的元数据过滤条件（给出时）。"))
    filter_admitted_count = serializers.IntegerField(
        required=False, help_text=_("有过滤条件时：通过过滤的就绪文档数（即实际检索的范围）。")
    )
    filter_ready_count = serializers.IntegerField(required=False, help_text=_("有过滤条件时：过滤前的就绪文档数。"))
    hyde = HydeTraceOutput(allow_null=True, help_text=_("HyDE 通道的情况；未要求或不可用时为 null。"))
    dynamic_top_k = DynamicTopKTraceOutput(
        allow_null=True, help_text=_("重排后的动态截断；使用固定 top_k 时为 null。")
    )


class ExplainOutput(serializers.Serializer):
    results = RetrievalResultOutput(many=True)
    trace = RetrievalTraceOutput()
