"""The item-confirmation set: how often rules A–C conclude what a person would, and the
thresholds that conclude it most often.

A case expects `items` (confirmed: exactly these), `clarify` (rule C with exactly these
candidates) or `none` (no item). Follow-ups are rewritten as the chat pipeline rewrites them
(the deterministic rule) before they are scored, with the case's `history` as the conversation.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from chat.contracts import ChatOptions
from chat.pipeline.items import RULE_NONE, confirm_items
from chat.pipeline.preparation import HistoryTurn, RuleFollowUpRewriter, prepare_retrieval
from chat.pipeline.rules import ItemRules, Rules
from knowledge.items.matching import ItemCatalog

# The grid calibration searches; the rules file's values are among its points.
HIGH = (0.75, 0.8, 0.85, 0.9, 0.95)
LOW = (0.4, 0.5, 0.6, 0.65)
GROUP = (0.5, 0.6, 0.7, 0.8)
FUZZY = (0.5, 0.6, 0.7, 0.8)


@dataclass(frozen=True)
class CaseResult:
    question: str
    expected: str  # "items" | "clarify" | "none"
    rule: str
    confirmed: tuple[str, ...]
    candidates: tuple[str, ...]
    right: bool


def expected_kind(case: dict) -> str:
    return "items" if "items" in case else "clarify" if "clarify" in case else "none"


def judge(case: dict, *, rule: str, confirmed: Sequence[str], candidates: Sequence[str]) -> bool:
    kind = expected_kind(case)
    if kind == "items":
        return sorted(confirmed) == sorted(case["items"])
    if kind == "clarify":
        return rule == "C" and sorted(candidates) == sorted(case["clarify"])
    return rule == RULE_NONE and not confirmed


def run_cases(cases: Iterable[dict], *, catalog: ItemCatalog, rules: Rules) -> list[CaseResult]:
    rewriter = RuleFollowUpRewriter(rules)
    results = []
    for case in cases:
        history = tuple(HistoryTurn(q, "", q) for q in case.get("history", ()))
        prepared, _ = prepare_retrieval(question=case["question"], history=history, options=ChatOptions(),
                                        rules=rules, rewriter=rewriter)
        confirmation, _ = confirm_items(question=prepared.rewritten_query, history=history,
                                        follow_up=prepared.follow_up, catalog=catalog, rules=rules.items)
        confirmed = tuple(c.name for c in confirmation.confirmed)
        candidates = tuple(c.name for c in confirmation.candidates)
        results.append(CaseResult(
            question=case["question"], expected=expected_kind(case), rule=confirmation.rule, confirmed=confirmed,
            candidates=candidates,
            right=judge(case, rule=confirmation.rule, confirmed=confirmed, candidates=candidates),
        ))
    return results


def by_rule(results: Sequence[CaseResult]) -> list[dict]:
    """Per rule fired: how many cases, how many concluded right."""
    fired, right = Counter(r.rule for r in results), Counter(r.rule for r in results if r.right)
    return [{"rule": rule, "count": fired[rule], "right": right[rule], "accuracy": round(right[rule] / fired[rule], 4)}
            for rule in sorted(fired)]


def by_expectation(results: Sequence[CaseResult]) -> list[dict]:
    asked, right = Counter(r.expected for r in results), Counter(r.expected for r in results if r.right)
    return [{"expected": kind, "count": asked[kind], "right": right[kind],
             "accuracy": round(right[kind] / asked[kind], 4)} for kind in sorted(asked)]


def calibrate(cases: Sequence[dict], *, catalog: ItemCatalog, rules: Rules) -> tuple[ItemRules, float, int]:
    """The grid point right on the most cases (ties: the one nearest the rules file's values),
    its accuracy, and how many points tied at it."""
    current = rules.items
    scored = []
    for high, low, group, fuzzy in itertools.product(HIGH, LOW, GROUP, FUZZY):
        if not low <= group < high or fuzzy > high:
            continue  # a family must land in the middle band, or it is confirmed or dropped
        candidate = replace(current, high=high, low=low, group_score=group, min_fuzzy=fuzzy)
        results = run_cases(cases, catalog=catalog, rules=replace(rules, items=candidate))
        accuracy = sum(r.right for r in results) / len(results)
        distance = (abs(high - current.high) + abs(low - current.low) + abs(group - current.group_score)
                    + abs(fuzzy - current.min_fuzzy))
        scored.append((accuracy, -distance, candidate))
    best = max(scored, key=lambda row: (row[0], row[1]))
    ties = sum(1 for row in scored if row[0] == best[0])
    return best[2], best[0], ties
