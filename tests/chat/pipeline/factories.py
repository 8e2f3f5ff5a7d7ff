"""Evidence objects for pipeline tests that need no database."""

from __future__ import annotations

import itertools

from chat.pipeline.preparation import RetrievalPlan
from chat.pipeline.rules import load_rules
from retrieval.contracts import AssetRef, FaqHit, RetrievalResult

_ids = itertools.count(100)


def result(content: str, *, title: str = "员工手册", content_type: str = "text", parent_id: str | None = None,
           assets=(), locator=None, heading_path=("第三章 假期",), chunk_id: int | None = None,
           context_chunk_ids=None, score: float = 0.03, meaning: float | None = None) -> RetrievalResult:
    chunk_id = chunk_id if chunk_id is not None else next(_ids)
    return RetrievalResult(
        chunk_id=chunk_id, document_id=1, document_title=title, matched_content=content, content=content,
        context_chunk_ids=tuple(context_chunk_ids or (chunk_id,)), score=score, rank_sources=("sparse:original",),
        content_type=content_type, content_types=(content_type,), assets=tuple(assets), locator=locator or {},
        heading_path=tuple(heading_path), parent_id=parent_id or f"p{chunk_id}", semantic_relevance=meaning,
    )


def asset(asset_id: int, caption: str = "前面板接口示意图") -> AssetRef:
    return AssetRef(id=asset_id, document_id=1, page=2, bbox=(0, 0, 10, 10), width=100, height=80,
                    caption=caption, url=f"/api/assets/{asset_id}")


def faq(question: str, answer: str, *, score: float, faq_id: int | None = None, exact: bool = False) -> FaqHit:
    return FaqHit(faq_id=faq_id or next(_ids), question=question, matched_question=question, answer=answer,
                  score=score, exact=exact)


def plan(**overrides) -> RetrievalPlan:
    rules = load_rules()
    values = dict(
        faq_top_k=5, faq_candidate_k=20, doc_top_k=5, candidate_k=30,
        mode="hybrid", enable_query_rewrite=True, enable_rerank=False, enable_parent_expansion=True,
        document_ids=None, prefer_table=False, min_context_score=rules.context.min_context_score,
        faq_direct_threshold=rules.faq.direct_threshold,
    )
    values.update(overrides)
    return RetrievalPlan(**values)
