"""Stage 1: query routing (seed 003 §2.5–2.6) — direct answer, FAQ exact, or retrieval.

`route` says what the system does next, `intent` what the user wants: an exact FAQ hit is
`route=faq_exact` with `intent=FAQ_QUERY`. Direct answers come first, so greetings and
hand-off requests never query the knowledge base; the FAQ fast path tries only short
single-line questions and answers only on an exact match of a standard or similar question
(no similarity threshold: the intent is not known yet). Its candidates are kept so stage 3 can
reuse them.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext as _

from chat.contracts import IntentResult
from retrieval.contracts import FaqHit
from retrieval.faqs import FaqRetrieval, FaqSearchRequest, FaqSearchResponse

from .rules import Rules
from .runtime import QueryContext


@dataclass(frozen=True)
class RouteDecision:
    route: str  # direct_answer | faq_exact | retrieval
    reason: str
    answer: str | None = None
    intent: IntentResult | None = None
    faq_hit: FaqHit | None = None
    fast_faq: FaqSearchResponse | None = None  # FAQ candidates of the original question

    def as_dict(self) -> dict:
        return {
            "route": self.route,
            "reason": self.reason,
            "intent": self.intent.as_dict() if self.intent else None,
            "faq_id": self.faq_hit.faq_id if self.faq_hit else None,
            "fast_path_tried": self.fast_faq is not None,
        }


def decide_route(ctx: QueryContext, *, rules: Rules, faqs: FaqRetrieval) -> RouteDecision:
    question = ctx.question
    for rule in rules.direct:
        if rule.matches(question):
            return RouteDecision(
                route="direct_answer",
                reason=f"direct_rule:{rule.intent.lower()}",
                answer=fill_answer(rule.answer, ctx),
                intent=IntentResult(rule.intent, rule.rule_score, rule.rule_score, "direct_rule"),
            )
    if not should_try_faq_fast_path(question, rules):
        return RouteDecision(route="retrieval", reason="long_or_multiline_question")

    fast = faqs.search(
        FaqSearchRequest(
            kb_id=ctx.kb.pk,
            variants=(question,),
            top_k=max(rules.faq_fast_path.top_k, rules.faq.top_k),
            candidate_k=rules.faq.candidate_k,
        ),
        cancel=ctx.cancel,
    )
    ctx.add_cache(fast.cache.as_dict())
    ctx.degradations.extend(fast.degradations)
    exact = next((hit for hit in fast.hits if hit.exact), None)
    if exact is not None:
        return RouteDecision(
            route="faq_exact",
            reason="faq_exact_match",
            answer=exact.answer,
            intent=IntentResult("FAQ_QUERY", 1.0, 1.0, "faq_exact_match"),
            faq_hit=exact,
            fast_faq=fast,
        )
    return RouteDecision(route="retrieval", reason="no_exact_faq", fast_faq=fast)


def should_try_faq_fast_path(question: str, rules: Rules) -> bool:
    compact = question.strip()
    return bool(compact) and len(compact) <= rules.faq_fast_path.max_chars and "\n" not in compact


def fill_answer(template: str, ctx: QueryContext) -> str:
    """The rules file's answer in the active language (its strings are in the catalog)."""
    contact = ctx.kb.support_contact or _("知识库管理员")
    return _(template).format(kb_name=ctx.kb.name, support_contact=contact)
