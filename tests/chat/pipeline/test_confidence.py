"""answer_confidence: the fixed formulas against hand-computed values."""

from __future__ import annotations

import math

import pytest

from chat.contracts import ConfidenceLevel
from chat.pipeline.confidence import (
    NOT_APPLICABLE,
    AnswerFeatures,
    ConfidenceRules,
    SourceEvidence,
    answer_features,
    answers_kind,
    calculate_evidence_confidence,
    calculate_generation_confidence,
    combine_answer_confidence,
    fact_units,
    level_of,
    normalized_retrieval_score,
)


def evidence(**overrides):
    values = dict(
        hit_type="rag", retrieval_top_score=0.9, context_count=4, source_count=7,
        intent_rule_score=0.84, intent_decision_score=0.84, history_rewrite_used=False,
    )
    values.update(overrides)
    return calculate_evidence_confidence(**values)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(-1.0, 0.0), (0.0, 0.0), (0.42, 0.42), (1.0, 1.0), (3.0, 0.75), (1.5, 0.6)],
)
def test_normalized_retrieval_score_squashes_logits_above_one(raw, expected):
    assert normalized_retrieval_score(raw) == pytest.approx(expected)


def test_direct_answer_is_078_plus_018_times_decision_score():
    # 0.78 + 0.18 × 0.95 = 0.951
    assert evidence(hit_type="direct_answer", intent_decision_score=0.95).score == 0.951


def test_faq_exact_is_fixed_095():
    assert evidence(hit_type="faq_exact", retrieval_top_score=0.1).score == 0.95


def test_faq_similarity_direct_answer():
    # 0.55 + 0.35 × 0.86 + 0.08 × 0.84 = 0.9182
    assert evidence(hit_type="faq_direct", retrieval_top_score=0.86).score == pytest.approx(0.9182)


def test_insufficient_context():
    # 0.12 + 0.15 × 0.3 = 0.165
    assert evidence(hit_type="insufficient_context", retrieval_top_score=0.3).score == pytest.approx(0.165)


def test_document_rag_counts_at_most_four_contexts_and_three_sources():
    # 0.20 + 0.45 × 0.5 + 4 × 0.06 + 3 × 0.04 + 0.12 × 0.84 = 0.8858
    assert evidence(retrieval_top_score=0.5, context_count=9, source_count=9).score == pytest.approx(0.8858)


def test_document_rag_penalties_stack():
    # 0.20 + 0.45 × 0.5 + 1 × 0.06 + 1 × 0.04 + 0.12 × 0.66 = 0.6042
    # − 0.05 (history rewrite) − 0.08 (< 2 contexts) − 0.04 (decision < 0.70) = 0.4342
    result = evidence(
        retrieval_top_score=0.5, context_count=1, source_count=1,
        intent_decision_score=0.66, intent_rule_score=0.66, history_rewrite_used=True,
    )
    assert result.score == pytest.approx(0.4342)
    assert set(result.reasons) >= {"history_rewrite_used", "few_context_items", "low_intent_decision_score"}


def test_document_rag_without_context_is_capped_at_035():
    assert evidence(retrieval_top_score=1.0, context_count=0, source_count=3).score == 0.35


def test_scores_are_clamped_to_one():
    assert evidence(retrieval_top_score=1.0).score == 1.0


@pytest.mark.parametrize(("score", "level"), [(0.82, "high"), (0.8199, "medium"), (0.55, "medium"), (0.5499, "low")])
def test_levels(score, level):
    assert level_of(score) == level


def test_generation_verification_of_a_fully_cited_grounded_answer():
    # given: every line cited, every word from the context
    answer = "年假为 7 天。[来源 1](citation://1)\n婚假为 10 天。[来源 2](citation://2)"
    # when
    result = calculate_generation_confidence(
        answer=answer, context_numbers={1, 2}, context_texts=["员工年假为 7 天。", "婚假为 10 天。"],
        removed_citations=[], blocked_images=0, declined=False,
    )
    # then: 0.25 + 0.45 × 1 + 0.30 × 1 = 1.0
    assert result.status == "verified"
    assert result.score == 1.0
    assert result.signals["valid_citation_numbers"] == [1, 2]
    assert result.signals["citation_coverage"] == 1.0


def test_generation_verification_counts_removed_citations_and_uncited_lines():
    # given: one of two lines cited; one invented source was removed while streaming
    answer = "年假为 7 天。[来源 1](citation://1)\n婚假为 10 天。"
    # when
    result = calculate_generation_confidence(
        answer=answer, context_numbers={1}, context_texts=["年假为 7 天。婚假为 10 天。"],
        removed_citations=[9], blocked_images=0, declined=False,
    )
    # then: 0.25 + 0.45 × 0.5 + 0.30 × 1 − 0.10 = 0.675
    assert result.score == pytest.approx(0.675)
    assert result.status == "partial"
    assert result.signals["invalid_citation_numbers"] == [9]
    assert "invalid_citations_removed" in result.reasons


def test_reference_tail_is_not_an_inline_citation():
    answer = "年假为 7 天。\n\n参考来源：[来源 1](citation://1) 员工手册"
    result = calculate_generation_confidence(
        answer=answer, context_numbers={1}, context_texts=["年假为 7 天。"],
        removed_citations=[], blocked_images=0, declined=False,
    )
    assert result.signals["citation_coverage"] == 0.0
    assert "no_inline_citation" in result.reasons


def test_empty_and_declined_answers_fail():
    empty = calculate_generation_confidence(answer=" ", context_numbers={1}, context_texts=["x"],
                                            removed_citations=[], blocked_images=0, declined=False)
    declined = calculate_generation_confidence(answer="根据当前知识库无法确定该问题的答案。", context_numbers={1},
                                               context_texts=["x"], removed_citations=[], blocked_images=0, declined=True)
    assert (empty.status, empty.score) == ("failed", 0.0)
    assert declined.status == "failed"
    assert "model_declined" in declined.reasons


def test_final_score_is_the_conservative_minimum():
    # given: strong evidence (0.95) but an answer citing nothing (generation 0.62)
    strong = evidence(hit_type="faq_exact")
    weak = calculate_generation_confidence(
        answer="年假为 7 天。婚假 10 天。", context_numbers={1}, context_texts=["年假为 7 天。"],
        removed_citations=[], blocked_images=0, declined=False,
    )
    # when
    combined = combine_answer_confidence(strong, weak)
    # then
    assert combined.score == min(0.95, weak.score)
    assert combined.evidence.score == 0.95
    assert combined.as_dict()["generation_verification"]["status"] == weak.status


def test_not_applicable_keeps_the_evidence_score():
    combined = combine_answer_confidence(evidence(hit_type="direct_answer", intent_decision_score=0.9), NOT_APPLICABLE)
    assert combined.score == pytest.approx(0.942)
    assert combined.level == ConfidenceLevel.HIGH
    assert combined.label == "高"
    assert combined.as_dict()["generation_verification"]["status"] == "not_applicable"
    assert set(combined.as_dict()["signals"]) >= {
        "retrieval_top_score", "normalized_retrieval_score", "context_count", "source_count",
        "intent_rule_score", "intent_decision_score", "history_rewrite_used",
        "evidence_confidence_score", "generation_verification_score", "generation_verification_status",
    }


def test_a_table_and_the_marker_after_it_are_one_fact_unit():
    answer = "| 城市 | 标准 |\n| --- | --- |\n| 深圳 | 500元/晚 |\n[来源 1](citation://1)\n另有补贴。"
    assert fact_units(answer) == ["| 城市 | 标准 |\n| 深圳 | 500元/晚 |[来源 1](citation://1)", "另有补贴。"]


def test_a_quantity_question_answered_without_a_number_is_never_high():
    # given: a "几位" question answered by a well-cited sentence that holds no number
    answer = "域账号密码同时用于登录电脑和企业邮箱。[来源 1](citation://1)"
    context = ["域账号密码同时用于登录电脑和企业邮箱。"]
    # when
    unasked = calculate_generation_confidence(answer=answer, context_numbers={1}, context_texts=context,
                                              removed_citations=[], blocked_images=0, declined=False)
    asked = calculate_generation_confidence(answer=answer, context_numbers={1}, context_texts=context,
                                            removed_citations=[], blocked_images=0, declined=False,
                                            question="域账号密码最少要几位？")
    # then
    assert unasked.status == "verified"
    assert asked.status == "partial" and "answer_shape_mismatch" in asked.reasons
    assert level_of(asked.score) != "high"


@pytest.mark.parametrize(
    ("question", "first_line", "answers"),
    [
        ("星河X3 Pro 有多重？", "星河X3 Pro 整机保修 3 年。", False),
        ("星河X3 Pro 有多重？", "星河X3 Pro 的重量是 780g。", True),
        ("报销款多久到账？", "财务审核通过后 7 个工作日内打入工资卡。", True),
        ("报销款多久到账？", "报销金额超过 20,000 元须财务总监审批。", False),
        ("婚假有几天？", "婚假 10 天。", True),
    ],
)
def test_a_question_naming_its_measure_wants_an_amount_of_that_measure(question, first_line, answers):
    assert answers_kind(question, f"{first_line}[来源 1](citation://1)") is answers


RULES = ConfidenceRules(bias=-2.0, weights=(("coverage", 2.0), ("shape", 2.0)), high=0.85, medium=0.5)


def features(**overrides):
    values = dict(coverage=1.0, relevance=1.0, meaning=0.0, shape=1.0, agreement=1.0)
    values.update(overrides)
    return AnswerFeatures(**values)


def test_a_document_answer_is_scored_by_the_fitted_model_and_its_cut_offs():
    # given: verified answers, one that covers the question and has its shape, one that does not
    verified = calculate_generation_confidence(answer="年假 7 天。[来源 1](citation://1)", context_numbers={1},
                                               context_texts=["年假 7 天。"], removed_citations=[],
                                               blocked_images=0, declined=False)
    # when
    good = combine_answer_confidence(evidence(), verified, features=features(), rules=RULES)
    weak = combine_answer_confidence(evidence(), verified, features=features(coverage=0.2, shape=0.0), rules=RULES)
    # then: the logistic probability, labelled by the rules' cut-offs, with the features traced
    assert good.score == pytest.approx(1 / (1 + math.exp(-2.0)), abs=1e-4) and good.level == ConfidenceLevel.HIGH
    assert weak.score == pytest.approx(1 / (1 + math.exp(1.6)), abs=1e-4) and weak.level == ConfidenceLevel.LOW
    assert "calibrated_probability" in good.reasons
    assert good.features.coverage == 1.0 and good.as_dict()["signals"]["features"]["coverage"] == 1.0


def test_a_failed_verification_still_bounds_the_calibrated_score():
    failed = calculate_generation_confidence(answer="根据当前知识库无法确定。", context_numbers={1},
                                             context_texts=["年假 7 天。"], removed_citations=[],
                                             blocked_images=0, declined=True)
    combined = combine_answer_confidence(evidence(), failed, features=features(), rules=RULES)
    assert combined.score <= failed.score


def test_features_are_measured_on_the_first_line_and_its_source():
    # given: two sources, the first line cites the second
    answer = "婚假 10 天。[来源 2](citation://2)\n病假须有证明。[来源 1](citation://1)"
    sources = [SourceEvidence(number=1, title="员工手册 · 病假", relevance=0.3, meaning=0.4),
               SourceEvidence(number=2, title="员工手册 · 婚假", relevance=0.9, meaning=0.95)]
    # when
    measured = answer_features(question_terms=["婚假"], answer=answer, sources=sources, question="婚假有几天？")
    # then
    assert measured == AnswerFeatures(coverage=1.0, relevance=0.9, meaning=0.95, shape=1.0, agreement=0.5)


def test_the_rules_file_rejects_unknown_features_and_disordered_cut_offs():
    import tomllib

    from chat.pipeline.rules import DEFAULT_RULES_PATH, RulesError, parse_rules

    raw = tomllib.loads(DEFAULT_RULES_PATH.read_text(encoding="utf-8"))
    assert parse_rules(raw).confidence.high > parse_rules(raw).confidence.medium
    raw["confidence"]["weights"]["length"] = 1.0
    with pytest.raises(RulesError, match="length"):
        parse_rules(raw)
    del raw["confidence"]["weights"]["length"]
    raw["confidence"]["high"] = 0.3
    with pytest.raises(RulesError, match="medium"):
        parse_rules(raw)
