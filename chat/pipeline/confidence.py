"""`answer_confidence`: how sure a turn is of its answer, from the evidence and from the answer text.

1. `calculate_evidence_confidence` before generation, per answer path:

   | path                         | score                                                          |
   |------------------------------|----------------------------------------------------------------|
   | deterministic direct answer  | 0.78 + 0.18 × intent_decision_score                            |
   | FAQ exact (standard question)| 0.95                                                           |
   | FAQ similarity direct answer | 0.55 + 0.35 × nrs + 0.08 × intent_decision_score               |
   | insufficient context         | 0.12 + 0.15 × nrs                                              |
   | document RAG                 | 0.20 + 0.45 × nrs + min(context_count, 4) × 0.06               |
   |                              |      + min(source_count, 3) × 0.04 + 0.12 × intent_decision_score |

   with nrs = normalized_retrieval_score (≤ 0 → 0, (0, 1] as is, > 1 → 1 − 1/(1 + s)). Document RAG
   loses 0.05 when it relied on a history rewrite, 0.08 with fewer than 2 context items and
   0.04 when the decision score is below 0.70; with no context its score is capped at 0.35.
2. `calculate_generation_confidence` after generation, on the final answer text (the appended
   "参考来源：" tail is not an inline citation and is removed first).
3. `combine_answer_confidence`: min(evidence, generation) — generation `not_applicable` keeps the
   evidence score. Levels: high ≥ 0.82, medium ≥ 0.55, low.
4. Document answers are then scored on data instead (`ConfidenceRules`, the `[confidence]`
   table of the rules file): a logistic model over `AnswerFeatures` measured on the written
   answer, fitted on evaluation runs, with the high / medium cut-offs chosen so that answers
   labelled high were right at least 95% of the time on every set measured. The fixed formula above
   ranked right and wrong answers no better than chance on those runs.

`retrieval_top_score` is the relevance of the best evidence on the provider-independent lexical
scale of `engines.lexical` (FAQ similarity, or question coverage of a document), in [0, 1]:
fusion scores are rank-based and say nothing absolute.

Generation verification:
score = 0.25 + 0.45 × citation_coverage + 0.30 × context_overlap − 0.10 per removed invalid
citation (at most 3), clamped to [0, 1]; `verified` when coverage ≥ 0.8, overlap ≥ 0.7 and no
invalid citation, `failed` when the answer is empty, declines, or scores below 0.45, else
`partial`. An answer whose first line lacks what the question asks for (a quantity for a
"多少 / 几 / 多久" question) is `partial` and scores below high (`answer_shape_mismatch`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from engines.lexical import asks_quantity, content_terms, coverage, normalise, states_measure, states_quantity

from ..contracts import (
    HIGH,
    MEDIUM,
    AnswerConfidence,
    AnswerFeatures,
    ConfidenceLevel,
    EvidenceConfidence,
    GenerationVerification,
    HitType,
    VerificationStatus,
    level_of,
)

__all__ = [
    "HIGH", "MEDIUM", "NOT_APPLICABLE", "AnswerFeatures", "ConfidenceRules", "SourceEvidence",
    "answer_features", "calculate_evidence_confidence", "calculate_generation_confidence",
    "combine_answer_confidence", "fact_units", "level_of",
]

_CITATION = re.compile(r"\[来源 (\d+)\]\(citation://\d+\)")
_IMAGE = re.compile(r"!\[[^\]\n]*\]\(asset://\d+\)")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}")


def normalized_retrieval_score(score: float) -> float:
    if score <= 0:
        return 0.0
    if score <= 1:
        return float(score)
    return 1 - 1 / (1 + score)


def _clamp(value: float) -> float:
    return max(0.0, min(1.0, value))


def calculate_evidence_confidence(
    *,
    hit_type: HitType,
    retrieval_top_score: float,
    context_count: int,
    source_count: int,
    intent_rule_score: float,
    intent_decision_score: float,
    history_rewrite_used: bool,
) -> EvidenceConfidence:
    nrs = normalized_retrieval_score(retrieval_top_score)
    reasons: list[str] = []
    if hit_type == HitType.DIRECT_ANSWER:
        score = 0.78 + 0.18 * intent_decision_score
        reasons.append("deterministic_direct_answer")
    elif hit_type == HitType.FAQ_EXACT:
        score = 0.95
        reasons.append("faq_exact_match")
    elif hit_type == HitType.FAQ_DIRECT:
        score = 0.55 + 0.35 * nrs + 0.08 * intent_decision_score
        reasons.append("faq_similarity_match")
    elif hit_type == HitType.INSUFFICIENT_CONTEXT:
        score = 0.12 + 0.15 * nrs
        reasons.append("insufficient_context")
    elif hit_type == HitType.CLARIFY:
        # A question back states no fact: there is nothing to be right or wrong about.
        score = 0.5
        reasons.append("clarifying_question")
    else:
        score = (
            0.20 + 0.45 * nrs + min(context_count, 4) * 0.06 + min(source_count, 3) * 0.04
            + 0.12 * intent_decision_score
        )
        reasons.append("rag_with_context" if context_count else "rag_without_context")
        if history_rewrite_used:
            score -= 0.05
            reasons.append("history_rewrite_used")
        if context_count < 2:
            score -= 0.08
            reasons.append("few_context_items")
        if intent_decision_score < 0.70:
            score -= 0.04
            reasons.append("low_intent_decision_score")
        if context_count == 0:
            score = min(score, 0.35)
    score = round(_clamp(score), 4)
    return EvidenceConfidence(
        score=score,
        reasons=tuple(reasons),
        signals={
            "retrieval_top_score": round(retrieval_top_score, 4),
            "normalized_retrieval_score": round(nrs, 4),
            "context_count": context_count,
            "source_count": source_count,
            "intent_rule_score": intent_rule_score,
            "intent_decision_score": intent_decision_score,
            "history_rewrite_used": history_rewrite_used,
        },
    )


NOT_APPLICABLE = GenerationVerification(1.0, VerificationStatus.NOT_APPLICABLE, ("no_generation",), {})


def fact_units(answer: str) -> list[str]:
    """Lines of the answer that state something: table blocks count once (with the marker that
    follows them), image lines and table rules not at all."""
    units: list[str] = []
    table: list[str] = []
    for raw in answer.splitlines():
        line = raw.strip()
        if line.startswith("|"):
            if not _TABLE_RULE.match(line.strip("|").strip()):
                table.append(line)
            continue
        if table:
            if line and not _CITATION.sub("", line).strip():
                units.append("\n".join(table) + line)
                table = []
                continue
            units.append("\n".join(table))
            table = []
        if not line or not _IMAGE.sub("", line).strip():
            continue
        units.append(line)
    if table:
        units.append("\n".join(table))
    return units


def answers_kind(question: str, line: str) -> bool:
    """Whether the answer's first line has the kind of content the question asks for (so far:
    a quantity for 多少 / 几 / 多久 questions, in a unit of the measure the question names: a
    weight for "多重", a duration for "多久"). True when the question asks for no such kind."""
    if not question or not asks_quantity(question):
        return True
    text = _IMAGE.sub("", _CITATION.sub("", line))
    return states_quantity(text) and states_measure(question, text)


def calculate_generation_confidence(
    *,
    answer: str,
    context_numbers: set[int],
    context_texts: list[str],
    removed_citations: list[int],
    blocked_images: int,
    declined: bool,
    question: str = "",
) -> GenerationVerification:
    body = answer.split("\n\n参考来源：")[0]
    units = fact_units(body)
    cited_units = [u for u in units if _CITATION.search(u)]
    valid = sorted({int(n) for n in _CITATION.findall(body) if int(n) in context_numbers})
    invalid = sorted(set(removed_citations))
    plain = _IMAGE.sub("", _CITATION.sub("", body))
    terms = content_terms(plain)
    overlap = coverage(terms, "", normalised_text=normalise("\n".join(context_texts))).score if terms else 0.0
    citation_coverage = len(cited_units) / len(units) if units else 0.0
    chars = len(normalise(plain))
    reasons: list[str] = []
    if chars < 2:
        score, status = 0.0, VerificationStatus.FAILED
        reasons.append("answer_empty")
    else:
        score = 0.25 + 0.45 * citation_coverage + 0.30 * overlap - 0.10 * min(len(removed_citations), 3)
        score = round(_clamp(score), 4)
        if declined:
            status = VerificationStatus.FAILED
            reasons.append("model_declined")
        elif citation_coverage >= 0.8 and overlap >= 0.7 and not invalid:
            status = VerificationStatus.VERIFIED
            reasons.append("generation_grounded")
        elif score < 0.45:
            status = VerificationStatus.FAILED
        else:
            status = VerificationStatus.PARTIAL
        if not valid:
            reasons.append("no_inline_citation")
        elif citation_coverage < 0.8:
            reasons.append("citation_coverage_low")
        if overlap < 0.7:
            reasons.append("context_overlap_low")
        if invalid:
            reasons.append("invalid_citations_removed")
        if blocked_images:
            reasons.append("images_blocked")
        if status != VerificationStatus.FAILED and not answers_kind(question, units[0] if units else ""):
            # "几位？" answered without a number has not answered what was asked, however well
            # its sentence is cited: never high.
            status = VerificationStatus.PARTIAL
            score = min(score, round(HIGH - 0.01, 4))
            reasons.append("answer_shape_mismatch")
    return GenerationVerification(
        score=score,
        status=status,
        reasons=tuple(reasons),
        signals={
            "citation_coverage": round(citation_coverage, 4),
            "context_overlap": round(overlap, 4),
            "valid_citation_numbers": valid,
            "invalid_citation_numbers": invalid,
            "answer_char_count": chars,
            "fact_unit_count": len(units),
            "blocked_images": blocked_images,
        },
    )


@dataclass(frozen=True)
class ConfidenceRules:
    """A logistic model of "this document answer is right", fitted on measured evaluation runs
    (`manage.py calibrate_confidence`), and the probabilities at which an answer is labelled
    high and medium, chosen from the same runs' reliability tables."""

    bias: float
    weights: tuple[tuple[str, float], ...]
    high: float
    medium: float

    def probability(self, features: AnswerFeatures) -> float:
        values = dict(zip(AnswerFeatures.NAMES, features.values(), strict=True))
        z = self.bias + math.fsum(weight * values[name] for name, weight in self.weights)
        return 1.0 / (1.0 + math.exp(-z))

    def level(self, probability: float) -> ConfidenceLevel:
        return ConfidenceLevel.of(probability, high=self.high, medium=self.medium)


@dataclass(frozen=True)
class SourceEvidence:
    """What the confidence reads of one numbered context source."""

    number: int
    title: str
    relevance: float  # lexical relevance to the question
    meaning: float | None  # calibrated dense relevance (None without one)


_NO_SOURCE = SourceEvidence(number=0, title="", relevance=0.0, meaning=None)


def answer_features(
    *, question_terms: Sequence[str], answer: str, sources: Sequence[SourceEvidence], question: str,
) -> AnswerFeatures:
    """Features of a written answer, measured on its first line and the source that line cites."""
    body = answer.split("\n\n参考来源：")[0]
    units = fact_units(body)
    first = units[0] if units else ""
    cited = [int(n) for n in _CITATION.findall(first)]
    number = cited[0] if cited else None
    source = next((s for s in sources if s.number == number), _NO_SOURCE)
    title, relevance, meaning = source.title, source.relevance, source.meaning
    plain = _IMAGE.sub("", _CITATION.sub("", first))
    terms = list(question_terms)
    covered = coverage(terms, "", normalised_text=normalise(f"{title}\n{plain}")).score if terms else 0.0
    all_cited = [int(n) for n in _CITATION.findall(body)]
    agreement = all_cited.count(number) / len(all_cited) if all_cited and number is not None else 0.0
    return AnswerFeatures(
        coverage=covered, relevance=float(relevance), meaning=float(meaning or 0.0),
        shape=float(answers_kind(question, first)), agreement=agreement,
    )


def combine_answer_confidence(
    evidence: EvidenceConfidence, generation: GenerationVerification, *,
    features: AnswerFeatures | None = None, rules: ConfidenceRules | None = None,
) -> AnswerConfidence:
    """min(evidence, generation); for a document answer with calibration rules, the
    calibrated probability of being right instead (never above a failed verification's score,
    never high when the answer lacks what was asked)."""
    applicable = generation.status != VerificationStatus.NOT_APPLICABLE
    final = min(evidence.score, generation.score) if applicable else evidence.score
    calibrated = features is not None and rules is not None
    if calibrated:
        final = rules.probability(features)
        if generation.status == VerificationStatus.FAILED:
            final = min(final, generation.score)
        if "answer_shape_mismatch" in generation.reasons:
            final = min(final, rules.high - 0.0001)
    final = round(_clamp(final), 4)
    reasons = list(evidence.reasons)
    reasons += [r for r in generation.reasons if r not in reasons and applicable]
    if calibrated:
        reasons.append("calibrated_probability")
    return AnswerConfidence(
        score=final,
        level=rules.level(final) if calibrated else level_of(final),
        reasons=tuple(reasons),
        evidence=evidence,
        verification=generation,
        features=features,
    )
