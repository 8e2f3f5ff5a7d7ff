"""Stage 3: FAQ retrieval with the threshold direct answer.

The route's fast-path candidates for the original question are reused, without a second search,
only when all of these hold: the retrieval question is still the original
(no follow-up rewrite), it is the first variant, no document filter differs (FAQs have none),
and the fast path fetched at least as many candidates as the plan needs. Otherwise the FAQ
collection is searched with the plan's variants.

Direct answer: the top hit equal to a phrasing (exact), or its similarity at or above the plan's
threshold (stricter for follow-ups, low decision scores and figure questions) with the same
model codes and numbers as the question.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from engines.lexical import asks_quantity, codes_and_numbers, normalise
from knowledge.models import KnowledgeBase
from retrieval.contracts import FaqHit
from retrieval.faqs import FaqSearchRequest, FaqSearchResponse
from retrieval.federation import FaqSearch

from .preparation import Preparation
from .routing import RouteDecision


@dataclass(frozen=True)
class FaqStage:
    response: FaqSearchResponse
    reused_fast_path: bool
    direct: FaqHit | None
    direct_kind: str  # "" | "exact" | "similarity"

    def as_dict(self) -> dict:
        return {
            **self.response.as_dict(),
            "reused_fast_path": self.reused_fast_path,
            "direct_answer": self.direct.faq_id if self.direct else None,
            "direct_kind": self.direct_kind,
        }


def search_faq(
    *, question: str, kb: KnowledgeBase, prepared: Preparation, route: RouteDecision, faqs: FaqSearch,
    cancel: threading.Event, also_kb_ids: tuple[int, ...] = (),
) -> FaqStage:
    """`question` is the turn's own (the route's fast path searched it); the stage searches what
    preparation made of it."""
    fast = route.fast_faq
    reusable = (
        fast is not None
        and normalise(prepared.rewritten_query) == normalise(question)
        and prepared.variants[:1] == fast.variants[:1]
        and fast.top_k >= prepared.plan.faq_top_k
    )
    if reusable:
        response = fast
    else:
        response = faqs.search(
            FaqSearchRequest(
                kb_id=kb.pk,
                also_kb_ids=also_kb_ids,
                variants=prepared.variants,
                top_k=prepared.plan.faq_top_k,
                candidate_k=prepared.plan.faq_candidate_k,
            ),
            cancel=cancel,
        )
    direct, kind = faq_direct_answer(
        response, threshold=prepared.plan.faq_direct_threshold, question=prepared.rewritten_query
    )
    return FaqStage(response=response, reused_fast_path=reusable, direct=direct, direct_kind=kind)


def faq_direct_answer(
    response: FaqSearchResponse, *, threshold: float, question: str
) -> tuple[FaqHit | None, str]:
    if not response.hits:
        return None, ""
    top = response.hits[0]
    if top.exact:
        return top, "exact"
    if (
        top.score >= threshold
        and codes_and_numbers(question) == codes_and_numbers(top.matched_question)
        # "星河X3 Pro 有多重？" is not "星河X3 和 X3 Pro 有什么区别？", however many names they share.
        and asks_quantity(question) == asks_quantity(top.matched_question)
    ):
        return top, "similarity"
    return None, ""
