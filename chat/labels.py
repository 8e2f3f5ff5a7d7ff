"""What the codes of an answer's trace mean, in words staff read (the codes stay in the JSON).

The enums of the pipeline (`Route`, `HitType`, `Intent`, `ConfidenceLevel`,
`VerificationStatus`) carry their own labels; this module words the open-ended codes: stage
names, confidence reasons and signals, why the evidence was insufficient, degradations and
error codes. A code no table knows (written by an older or newer release) is shown as it is.
Retrieval's own codes are worded in `retrieval.labels`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from retrieval import labels as retrieval_labels

from .contracts import VerificationStatus

STAGES = {
    "route": gettext_lazy("查询路由"),
    "prepare": gettext_lazy("检索准备"),
    "item_confirm": gettext_lazy("商品确认"),
    "faq_search": gettext_lazy("FAQ 检索"),
    "doc_search": gettext_lazy("文档检索"),
    "context_build": gettext_lazy("上下文构建"),
    "llm_generation": gettext_lazy("生成"),
    "citation_check": gettext_lazy("引用核验"),
    "save_history": gettext_lazy("保存"),
}
# Why a score is what it is (`answer_confidence.reasons`, `generation_verification.reasons`).
REASONS = {
    "deterministic_direct_answer": gettext_lazy("规则直接回答"),
    "faq_exact_match": gettext_lazy("FAQ 精确命中"),
    "faq_similarity_match": gettext_lazy("FAQ 相似命中"),
    "insufficient_context": gettext_lazy("依据不足"),
    "clarifying_question": gettext_lazy("反问用户是哪一款，未作答"),
    "rag_with_context": gettext_lazy("有检索依据"),
    "rag_without_context": gettext_lazy("无检索依据"),
    "history_rewrite_used": gettext_lazy("结合上文改写了问题"),
    "few_context_items": gettext_lazy("依据较少"),
    "low_intent_decision_score": gettext_lazy("问题意图不够明确"),
    "no_generation": gettext_lazy("没有生成回答，无需核验"),
    "answer_empty": gettext_lazy("回答为空"),
    "model_declined": gettext_lazy("模型拒绝作答"),
    "generation_grounded": gettext_lazy("回答有依据"),
    "no_inline_citation": gettext_lazy("回答未标注来源"),
    "citation_coverage_low": gettext_lazy("部分内容未标注来源"),
    "context_overlap_low": gettext_lazy("与资料重合度低"),
    "invalid_citations_removed": gettext_lazy("已移除无效引用"),
    "images_blocked": gettext_lazy("已屏蔽不可信图片"),
    "answer_shape_mismatch": gettext_lazy("回答未给出所问的数值"),
    "calibrated_probability": gettext_lazy("按实测答对率校准"),
}
# Why no evidence was good enough to answer from; retrieval's empty reasons come first.
INSUFFICIENT_REASONS = {
    "no_content_terms": gettext_lazy("问题中没有可检索的词"),
    "no_candidates": gettext_lazy("没有检索到任何内容"),
    "key_term_missing": gettext_lazy("检索到的内容缺少问题的关键词"),
    "below_relevance_floor": gettext_lazy("检索到的内容与问题相关度太低"),
}
SIGNALS = {
    "retrieval_top_score": gettext_lazy("最高检索分"),
    "normalized_retrieval_score": gettext_lazy("检索分（归一化）"),
    "context_count": gettext_lazy("上下文条数"),
    "source_count": gettext_lazy("来源条数"),
    "intent_rule_score": gettext_lazy("意图规则分"),
    "intent_decision_score": gettext_lazy("意图判定分"),
    "history_rewrite_used": gettext_lazy("结合上文改写"),
    "evidence_confidence_score": gettext_lazy("证据置信分"),
    "generation_verification_score": gettext_lazy("生成核验分"),
    "generation_verification_status": gettext_lazy("生成核验结果"),
    "citation_coverage": gettext_lazy("标注来源的句子占比"),
    "context_overlap": gettext_lazy("与资料的重合度"),
    "features": gettext_lazy("校准特征"),
    "valid_citation_numbers": gettext_lazy("有效引用"),
    "invalid_citation_numbers": gettext_lazy("已移除的引用"),
    "answer_char_count": gettext_lazy("回答字数"),
    "fact_unit_count": gettext_lazy("事实句数"),
    "blocked_images": gettext_lazy("已屏蔽的图片数"),
}
# The inputs of the calibrated confidence (`AnswerFeatures`), each in [0, 1].
FEATURES = {
    "coverage": gettext_lazy("问题词覆盖"),
    "relevance": gettext_lazy("来源相关度"),
    "meaning": gettext_lazy("语义相关度"),
    "shape": gettext_lazy("回答形式相符"),
    "agreement": gettext_lazy("引用一致"),
}
# Shares rather than scores: read as percentages.
PERCENT_SIGNALS = frozenset({"citation_coverage", "context_overlap"})
CITATION_LIST_SIGNALS = frozenset({"valid_citation_numbers", "invalid_citation_numbers"})
DEGRADATIONS = {
    "history_rewrite_failed": gettext_lazy("追问改写失败"),
    "item_extraction_failed": gettext_lazy("模型识别商品失败（已按名称确认）"),
    **retrieval_labels.DEGRADATIONS,
}
# The codes a failed turn's trace records (`QueryTrace.error_code`).
ERRORS = {
    "client_disconnected": gettext_lazy("读者中途离开，回答未完成"),
    "storage_unavailable": gettext_lazy("数据库暂时不可用"),
    "internal_error": gettext_lazy("内部错误"),
    "generation_failed": gettext_lazy("生成回答时模型出错"),
    "chat_model_unavailable": gettext_lazy("问答模型未配置或不可用"),
    "provider_error": gettext_lazy("模型服务出错"),
    "provider_timeout": gettext_lazy("模型服务超时"),
    "provider_rate_limited": gettext_lazy("模型服务限流"),
    "provider_unavailable": gettext_lazy("模型服务不可用"),
    "provider_bad_response": gettext_lazy("模型服务返回了无效结果"),
    "retrieval_unavailable": gettext_lazy("检索服务不可用"),
    "facts_unavailable": gettext_lazy("读取文档信息失败"),
}
CITATION_KINDS = {"chunk": gettext_lazy("文档"), "faq": gettext_lazy("FAQ"), "web": retrieval_labels.WEB_SOURCE}


# Item confirmation (chat/pipeline/items.py): which rule concluded, from what, by what match.
ITEM_RULES = {
    "A": gettext_lazy("规则 A：唯一高置信度商品，已确认"),
    "B": gettext_lazy("规则 B：多个高置信度商品，取精确匹配"),
    "C": gettext_lazy("规则 C：中等置信度，反问用户"),
    "none": gettext_lazy("问题未指向具体商品"),
    "chosen": gettext_lazy("用户在反问中选择"),
    "no_catalog": gettext_lazy("知识库没有商品目录"),
}
ITEM_SOURCES = {
    "question": gettext_lazy("问题本身"),
    "history": gettext_lazy("上一轮问题"),
    "model": gettext_lazy("模型识别"),
    "chosen": gettext_lazy("用户选择"),
}
ITEM_MATCHES = {
    "exact": gettext_lazy("名称完全匹配"),
    "fuzzy": gettext_lazy("名称近似"),
    "group": gettext_lazy("只提到系列"),
    "chosen": gettext_lazy("用户选择"),
}


def item_confirmation_rows(block: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The trace's item confirmation in words, for the trace page."""
    if not isinstance(block, Mapping) or not block.get("rule"):
        return None
    return {
        "rule": block["rule"], "rule_label": _label(ITEM_RULES, str(block["rule"])),
        "source": _label(ITEM_SOURCES, str(block.get("source") or "")) if block.get("source") else "",
        "confirmed": [c.get("name", "") for c in block.get("confirmed") or [] if isinstance(c, Mapping)],
        "candidates": [
            {"name": c.get("name", ""), "score": c.get("score"), "kind": c.get("kind", ""),
             "kind_label": _label(ITEM_MATCHES, str(c.get("kind", ""))), "matched": c.get("matched", "")}
            for c in block.get("candidates") or [] if isinstance(c, Mapping)
        ],
        "question": block.get("question", ""),
        "extracted": block.get("extracted", ""),
        "faq_set_aside": block.get("faq_set_aside"),
    }


def _label(labels: Mapping[str, Any], code: str) -> str:
    return str(labels[code]) if code in labels else code


def stage_label(stage: str) -> str:
    return _label(STAGES, stage)


def reason_label(reason: str) -> str:
    return _label(REASONS, reason)


def insufficient_reason_label(reason: str) -> str:
    if reason in INSUFFICIENT_REASONS:
        return str(INSUFFICIENT_REASONS[reason])
    return retrieval_labels.empty_reason_label(reason)


def degradation_label(code: str) -> str:
    """"dense_failed:original" → "语义检索失败（原问题）"."""
    return retrieval_labels.degradation_label(code, DEGRADATIONS)


def error_label(code: str) -> str:
    return _label(ERRORS, code)


def citation_kind_label(kind: str) -> str:
    return _label(CITATION_KINDS, kind)


def signal_value(name: str, value: Any) -> str:
    """A signal's value as a reader says it: 是/否, two decimals, a percentage, "来源 1、来源 4"."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return _("是") if value else _("否")
    if name == "generation_verification_status" and isinstance(value, str):
        return VerificationStatus.label_of(value)
    if name in PERCENT_SIGNALS and isinstance(value, int | float):
        return f"{value:.0%}"
    if isinstance(value, float):
        return f"{value:.2f}"
    if name in CITATION_LIST_SIGNALS and isinstance(value, list):
        return retrieval_labels.joined(_("来源 %(n)s") % {"n": number} for number in value) or _("无")
    if isinstance(value, list):
        return retrieval_labels.joined(str(item) for item in value) or _("无")
    if isinstance(value, dict):
        # The database may store the keys in any order: the features' own order reads best.
        keys = _in_order(value, FEATURES)
        return retrieval_labels.joined(f"{_label(FEATURES, key)} {signal_value(key, value[key])}" for key in keys)
    return str(value)


def _in_order(names: Iterable[str], known: Mapping[str, Any]) -> list[str]:
    """`names` in the order of `known`, unknown ones after them by name."""
    order = {name: index for index, name in enumerate(known)}
    return sorted((str(name) for name in names), key=lambda name: (order.get(name, len(order)), name))


def retrieval_step_rows(documents: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(code, words) of the optional retrieval steps a stored document trace records: HyDE and
    dynamic top-k. A trace stored before they were recorded, or without them, gives none."""
    if not isinstance(documents, Mapping):
        return []
    rows = []
    hyde = documents.get("hyde")
    if isinstance(hyde, Mapping):
        rows.append((f"hyde:{hyde.get('status', '')}", retrieval_labels.hyde_label(hyde)))
    dynamic = documents.get("dynamic_top_k")
    if isinstance(dynamic, Mapping):
        rows.append(("dynamic_top_k", retrieval_labels.dynamic_top_k_label(dynamic)))
    return rows


def signal_rows(signals: Mapping[str, Any] | None) -> list[dict[str, str]]:
    """(code, label, value) of each signal, in the order of the labels above, unknown ones last."""
    signals = signals or {}
    return [
        {"code": name, "label": _label(SIGNALS, name), "value": signal_value(name, signals[name])}
        for name in _in_order(signals, SIGNALS)
    ]
