"""Stage 1: query routing — direct answer, FAQ exact, or retrieval.

`route` says what the system does next, `intent` what the user wants: an exact FAQ hit is
`route=faq_exact` with `intent=FAQ_QUERY`. Direct answers come first, so greetings and
hand-off requests never query the knowledge base; the FAQ fast path tries only short
single-line questions and answers only on an exact match of a standard or similar question
(no similarity threshold: the intent is not known yet). Its candidates are kept so stage 3 can
reuse them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from django.utils.translation import gettext as _

from chat.contracts import IntentResult, Route
from knowledge.models import KnowledgeBase
from retrieval.contracts import FaqHit
from retrieval.faqs import FaqSearchRequest, FaqSearchResponse
from retrieval.federation import FaqSearch

from .rules import Rules


@dataclass(frozen=True)
class RouteDecision:
    route: Route
    reason: str
    answer: str | None = None
    intent: IntentResult | None = None
    faq_hit: FaqHit | None = None
    fast_faq: FaqSearchResponse | None = None  # FAQ candidates of the original question

    def as_dict(self) -> dict:
        return {
            "route": str(self.route),
            "reason": self.reason,
            "intent": self.intent.as_dict() if self.intent else None,
            "faq_id": self.faq_hit.faq_id if self.faq_hit else None,
            "fast_path_tried": self.fast_faq is not None,
        }


def decide_route(
    *, question: str, kb: KnowledgeBase, rules: Rules, faqs: FaqSearch, cancel: threading.Event,
    also_kb_ids: tuple[int, ...] = (),
) -> RouteDecision:
    for rule in rules.direct:
        if rule.matches(question):
            return RouteDecision(
                route=Route.DIRECT_ANSWER,
                reason=f"direct_rule:{rule.intent.lower()}",
                answer=fill_answer(rule.answer, kb),
                intent=IntentResult(rule.intent, rule.rule_score, rule.rule_score, "direct_rule"),
            )
    if not should_try_faq_fast_path(question, rules):
        return RouteDecision(route=Route.RETRIEVAL, reason="long_or_multiline_question")

    fast = faqs.search(
        FaqSearchRequest(
            kb_id=kb.pk,
            also_kb_ids=also_kb_ids,
            variants=(question,),
            top_k=max(rules.faq_fast_path.top_k, rules.faq.top_k),
            candidate_k=rules.faq.candidate_k,
        ),
        cancel=cancel,
    )
    exact = next((hit for hit in fast.hits if hit.exact), None)
    if exact is not None:
        return RouteDecision(
            route=Route.FAQ_EXACT,
            reason="faq_exact_match",
            answer=exact.answer,
            intent=IntentResult("FAQ_QUERY", 1.0, 1.0, "faq_exact_match"),
            faq_hit=exact,
            fast_faq=fast,
        )
    return RouteDecision(route=Route.RETRIEVAL, reason="no_exact_faq", fast_faq=fast)


def should_try_faq_fast_path(question: str, rules: Rules) -> bool:
    compact = question.strip()
    return bool(compact) and len(compact) <= rules.faq_fast_path.max_chars and "\n" not in compact


def fill_answer(template: str, kb: KnowledgeBase) -> str:
    """The rules file's answer in the active language (its strings are in the catalog)."""
    contact = kb.support_contact or _("知识库管理员")
    return _(template).format(kb_name=kb.name, support_contact=contact)
