"""The JSON of retrieval's results: written out by hand for speed, so checked against the fields."""

from __future__ import annotations

import json
from dataclasses import asdict, fields

from retrieval.contracts import AssetRef, FaqHit, RetrievalResult


def _result() -> RetrievalResult:
    asset = AssetRef(id=7, document_id=2, page=3, bbox=(0.1, 0.2, 0.5, 0.6), width=640, height=480,
                     caption="背面接口示意图", url="/api/assets/7")
    return RetrievalResult(
        chunk_id=1, document_id=2, document_title="员工手册", matched_content="年假 5 天", content="年假 5 天。",
        context_chunk_ids=(1, 3), score=0.5, rank_sources=("dense:original",), content_type="text",
        content_types=("text", "table"), assets=(asset,), locator={"page": 3}, heading_path=("第一章", "年假"),
        parent_id="p1", fusion_score=0.4, rerank_score=None, preview_url="/api/chunks/1/preview",
        relevance=0.7, semantic_relevance=0.6,
    )


def test_a_results_json_has_every_field_as_the_generic_conversion_gives_it():
    result = _result()
    assert json.loads(json.dumps(result.as_dict())) == json.loads(json.dumps(asdict(result)))
    assert set(result.as_dict()) == {f.name for f in fields(RetrievalResult)}


def test_an_faq_hits_json_has_every_field_as_the_generic_conversion_gives_it():
    hit = FaqHit(faq_id=1, question="年假几天？", matched_question="年假有几天", answer="5 天", score=0.9,
                 rank_sources=("sparse:original",), exact=False, source_tag="hr", semantic=0.8)
    assert json.loads(json.dumps(hit.as_dict())) == json.loads(json.dumps(asdict(hit)))
    assert set(hit.as_dict()) == {f.name for f in fields(FaqHit)}
