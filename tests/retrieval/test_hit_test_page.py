"""The admin hit-test page in words: its form, its results and its trace (the codes as tooltips).

The page is rendered through the test client as staff; the retrieval it shows is a fixed response
(a degraded hybrid search over a table and a page), so every kind of code appears once.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from retrieval import views
from retrieval.contracts import (
    CacheEvent,
    CacheSummary,
    ChannelError,
    RetrievalResponse,
    RetrievalResult,
    RetrievalTrace,
    StageTiming,
)
from tests.retrieval.pages import visible_text


def result(chunk_id: int, **changes) -> RetrievalResult:
    fields = dict(
        chunk_id=chunk_id, document_id=7, document_title="星河 X 系列产品规格表", matched_content="| 星河X3 Pro | 3年 |",
        content="| 星河X3 Pro | 3年 |", context_chunk_ids=(chunk_id,), score=0.7587,
        rank_sources=("dense:original", "sparse:original"), content_type="table", content_types=("table",), assets=(),
        locator={"sheet": "价格与保修", "range": "A2:F6"}, heading_path=("价格与保修",), parent_id="p", fusion_score=0.7587,
        relevance=1.0,
    )
    return RetrievalResult(**{**fields, **changes})


RESPONSE = RetrievalResponse(
    results=(
        result(49),
        result(64, document_title="用户手册", content_type="text", content_types=("text",), rank_sources=("sparse:original",),
               locator={"page_start": 3, "page_end": 4}, heading_path=("用户手册", "7. 保修"),
               matched_content="保修期限", content="前文\n保修期限\n后文", context_chunk_ids=(63, 64, 65)),
    ),
    trace=RetrievalTrace(
        kb_id=1, version=1, cache_epoch=25, mode="hybrid", query_variants=("星河X3 Pro 的保修期是多久？",),
        ready_document_count=9, document_filter="none", candidate_counts={"sparse:original": 30, "fused": 30},
        stage_timings=(StageTiming("facts", 1.9), StageTiming("channel:sparse:original", 4.4)),
        channel_errors=(ChannelError("dense:original", "provider_timeout", "向量检索超时，已使用其他通道的结果。"),),
        degradations=("dense_failed:original",),
        cache=CacheSummary(True, 1, 2, (CacheEvent("epoch", False, "l3"), CacheEvent("doc_retrieval", False, "doc"),
                                        CacheEvent("query_embedding", True, "embedding"))),
        total_ms=12.93, notes=("rerank_unavailable", "dynamic_top_k_needs_rerank"),
        embedding_model="local-e5-small-v1", fusion="convex(minmax, dense=0.5)",
    ),
)
QUESTION = {"question": "星河X3 Pro 的保修期是多久？", "mode": "hybrid", "top_k": 5, "candidate_k": 30,
            "enable_rerank": "on", "enable_parent_expansion": "on"}


@pytest.fixture
def staff_client(client, staff_user):
    client.force_login(staff_user)
    return client


@pytest.mark.django_db
def test_hit_test_form_reads_in_words_with_help(staff_client, kb):
    # when
    page = staff_client.get(reverse("hit-test", args=[kb.pk])).content.decode()
    text = visible_text(page)
    # then
    for words in ("检索方式", "混合检索（语义 + 关键词）", "语义检索", "关键词检索", "返回条数", "候选条数",
                  "最终列出的结果条数（最多 50 条）。", "不少于返回条数，最多 200 条", "动态返回条数", "假设答案检索"):
        assert words in text, words
    for code in ("top_k", "candidate_k", "hybrid", "dense", "sparse", "模式"):
        assert code not in text, code
    assert '<option value="hybrid" selected>混合检索（语义 + 关键词）</option>' in page  # the field keeps its API codes


@pytest.mark.django_db
def test_hit_test_form_refuses_fewer_candidates_than_results_in_words(staff_client, kb):
    # when
    page = staff_client.post(reverse("hit-test", args=[kb.pk]), {**QUESTION, "top_k": 10, "candidate_k": 5}).content.decode()
    # then
    assert "候选条数不能小于返回条数。" in page and "candidate_k 不能小于" not in page


@pytest.mark.django_db
def test_hit_test_results_and_trace_read_in_words(staff_client, kb, monkeypatch):
    # given
    monkeypatch.setattr(views, "retrieve_for_user", lambda **options: RESPONSE)
    # when
    page = staff_client.post(reverse("hit-test", args=[kb.pk]), QUESTION).content.decode()
    text = visible_text(page)
    # then: results
    assert "分块 #49 · 表格" in text and "分块 #64 · 文本" in text
    assert reverse("admin:knowledge_chunk_change", args=[49]) in page
    assert "排序分 0.7587" in text and "融合分 0.7587" in text
    assert "命中途径: 语义检索（原问题） 关键词检索（原问题）" in text
    assert "工作表 价格与保修 A2:F6" in text and "第 3–4 页" in text
    assert "扩展后上下文（分块 #63、#64、#65）" in text
    # and: the trace
    for words in ("检索方式: 混合检索（语义 + 关键词）", "文档过滤: 无（所有文档都已就绪）", "缓存版本: 25",
                  "总耗时: 12.93 毫秒", "融合方式: 加权融合（语义权重 0.5）", "降级: 语义检索失败（原问题）",
                  "语义检索（原问题）: 向量检索超时，已使用其他通道的结果。", "动态返回条数需要重排分数，未启用",
                  "就绪文档", "关键词检索（原问题） 30 融合后 30",
                  "缓存版本（数据库）：未命中 文档检索结果：未命中 问题向量：命中", "耗时（毫秒）"):
        assert words in text, words
    # and: no code where a reader looks; each stays as a tooltip
    for code in ("chunk ", "text", "score", "dense:original", "sparse:original", "hybrid", " none", "缓存世代",
                 "epoch", ":hit", ":miss", " ms", "convex", "dense_failed", "provider_timeout", "rerank_unavailable"):
        assert code not in text, code
    for tooltip in ('title="dense:original"', 'title="epoch/l3:miss"', 'title="convex(minmax, dense=0.5)"',
                    'title="dense_failed:original"', 'title="provider_timeout"', 'title="none"', 'title="hybrid"'):
        assert tooltip in page, tooltip
