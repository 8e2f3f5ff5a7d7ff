"""The answering rules file (`chat/rules.toml`), parsed once into frozen, compiled settings."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings

from .confidence import AnswerFeatures, ConfidenceRules

DEFAULT_RULES_PATH = Path(__file__).resolve().parent.parent / "rules.toml"


class RulesError(Exception):
    """The rules file is missing a key or holds an invalid pattern."""


@dataclass(frozen=True)
class DirectRule:
    intent: str
    rule_score: float
    patterns: tuple[re.Pattern[str], ...]
    answer: str

    def matches(self, question: str) -> bool:
        return any(p.search(question) for p in self.patterns)


@dataclass(frozen=True)
class FaqFastPath:
    max_chars: int
    top_k: int


@dataclass(frozen=True)
class FollowUpRules:
    history_turns: int
    max_chars: int
    patterns: tuple[re.Pattern[str], ...]
    subject_boundaries: tuple[str, ...]


@dataclass(frozen=True)
class IntentRules:
    knowledge_strong_score: float
    knowledge_weak_score: float
    follow_up_score: float
    knowledge_patterns: tuple[re.Pattern[str], ...]


@dataclass(frozen=True)
class FaqRules:
    top_k: int
    candidate_k: int
    direct_threshold: float
    follow_up_penalty: float
    low_decision_penalty: float
    table_penalty: float


@dataclass(frozen=True)
class RetrievalDefaults:
    top_k: int
    candidate_k: int
    mode: str
    enable_query_rewrite: bool
    enable_parent_expansion: bool
    enable_rerank_local: bool
    enable_rerank_remote: bool
    # Defaults for rules files written before these settings existed.
    enable_hyde_remote: bool = False
    dynamic_top_k_after_rerank: bool = True


@dataclass(frozen=True)
class ContextRules:
    min_context_score: float
    min_meaning_score: float
    # For an answerer that writes (and judges the evidence itself): the meaning that lets the first
    # results in when nothing else does.
    model_min_meaning_score: float
    key_term_exempt_score: float
    faq_context_top_n: int
    final_context_top_n: int
    max_context_doc_chars: int
    max_context_chars: int
    prefer_table_patterns: tuple[re.Pattern[str], ...]


@dataclass(frozen=True)
class GenerationRules:
    max_tokens: int
    temperature: float
    references_on_missing_citations: int
    # A sentence the answerer left uncited gets the source holding this share of its content words
    # (the best source, when it reaches this); see chat/pipeline/citations.py, EvidenceCiter.
    attach_min_support: float


@dataclass(frozen=True)
class ItemRules:
    """Item confirmation (chat/pipeline/items.py): the bands of rules A–C."""

    high: float  # at or above: confirmed (A, or B among several)
    low: float  # at or above but below `high`: asked back (C)
    group_score: float  # a family named alone ("星河路由器"): every item of it scores this
    min_fuzzy: float  # near misses of a name below this similarity are not candidates
    clear_lead: float  # rule B without an exact name: the best wins when it leads by this much
    max_candidates: int  # at most this many choices in a clarifying question
    ask_model: bool  # ask a generative chat model which item is meant when the words leave it open

    def __post_init__(self) -> None:
        if not 0.0 < self.low <= self.high <= 1.0:
            raise RulesError("items: need 0 < low <= high <= 1")


@dataclass(frozen=True)
class Rules:
    direct: tuple[DirectRule, ...]
    faq_fast_path: FaqFastPath
    follow_up: FollowUpRules
    intent: IntentRules
    faq: FaqRules
    retrieval: RetrievalDefaults
    context: ContextRules
    generation: GenerationRules
    confidence: ConfidenceRules
    items: ItemRules


def _patterns(values, where: str) -> tuple[re.Pattern[str], ...]:
    try:
        return tuple(re.compile(value, re.IGNORECASE) for value in values)
    except re.error as exc:
        raise RulesError(f"{where}: invalid pattern: {exc}") from exc


def parse_rules(raw: dict) -> Rules:
    try:
        follow = raw["follow_up"]
        intent = raw["intent"]
        context = dict(raw["context"])
        return Rules(
            direct=tuple(
                DirectRule(
                    intent=item["intent"],
                    rule_score=float(item["rule_score"]),
                    patterns=_patterns(item["patterns"], f"direct {item['intent']}"),
                    answer=item["answer"],
                )
                for item in raw["direct"]
            ),
            faq_fast_path=FaqFastPath(**raw["faq_fast_path"]),
            follow_up=FollowUpRules(
                history_turns=int(follow["history_turns"]),
                max_chars=int(follow["max_chars"]),
                patterns=_patterns(follow["patterns"], "follow_up"),
                subject_boundaries=tuple(follow["subject_boundaries"]),
            ),
            intent=IntentRules(
                knowledge_strong_score=float(intent["knowledge_strong_score"]),
                knowledge_weak_score=float(intent["knowledge_weak_score"]),
                follow_up_score=float(intent["follow_up_score"]),
                knowledge_patterns=_patterns(intent["knowledge_patterns"], "intent"),
            ),
            faq=FaqRules(**raw["faq"]),
            retrieval=RetrievalDefaults(**raw["retrieval"]),
            context=ContextRules(
                **{**context, "prefer_table_patterns": _patterns(context["prefer_table_patterns"], "context")}
            ),
            generation=GenerationRules(**raw["generation"]),
            confidence=_confidence(raw["confidence"]),
            items=ItemRules(**raw["items"]),
        )
    except (KeyError, TypeError) as exc:
        raise RulesError(f"rules file is incomplete: {exc}") from exc


def _confidence(raw: dict) -> ConfidenceRules:
    weights = dict(raw["weights"])
    unknown = sorted(set(weights) - set(AnswerFeatures.NAMES))
    if unknown:
        raise RulesError(f"confidence: unknown features {', '.join(unknown)}")
    high, medium = float(raw["high"]), float(raw["medium"])
    if not 0.0 < medium <= high < 1.0:
        raise RulesError("confidence: need 0 < medium <= high < 1")
    return ConfidenceRules(
        bias=float(raw["bias"]),
        weights=tuple((name, float(weights[name])) for name in AnswerFeatures.NAMES if name in weights),
        high=high, medium=medium,
    )


@lru_cache(maxsize=4)
def _load(path: str) -> Rules:
    with open(path, "rb") as handle:
        return parse_rules(tomllib.load(handle))


def load_rules() -> Rules:
    """The rules of `settings.RAG_CHAT_RULES_FILE` (default `chat/rules.toml`)."""
    return _load(str(getattr(settings, "RAG_CHAT_RULES_FILE", "") or DEFAULT_RULES_PATH))
