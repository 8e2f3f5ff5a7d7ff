"""Retrieval's codes in words: what the hit-test page and the answer traces show staff."""

from __future__ import annotations

import pytest
from django.utils import translation

from retrieval.contracts import CacheEvent, CacheSummary, ChannelError, RetrievalTrace, StageTiming
from retrieval.labels import (
    cache_event_label,
    channel_label,
    content_type_label,
    degradation_label,
    describe_trace,
    document_filter_label,
    empty_reason_label,
    fusion_label,
    mode_label,
    note_label,
    stage_label,
)


@pytest.mark.parametrize(("code", "words"), [
    ("dense:original", "语义检索（原问题）"),
    ("sparse:rewrite", "关键词检索（改写）"),
    ("sparse:chinese", "关键词检索（中文关键词）"),
    ("dense:context", "语义检索（结合上文）"),
    ("dense:context2", "语义检索（结合上文 2）"),
    ("dense:hyde", "语义检索（假设答案）"),
    ("faq_dense:original", "FAQ 语义检索（原问题）"),
    ("rerank", "重排"),
    ("brand_new:variant", "brand_new（variant）"),
])
def test_channels_read_as_the_search_and_the_wording_searched(code, words):
    assert channel_label(code) == words


@pytest.mark.parametrize(("fusion", "words"), [
    ("rrf(k=60)", "倒数排名融合（k=60）"),
    ("convex(minmax, dense=0.5)", "加权融合（语义权重 0.5）"),
    ("none", "未融合（只有一路结果）"),
    ("something(new)", "something(new)"),
])
def test_fusion_reads_as_its_method(fusion, words):
    assert fusion_label(fusion) == words


def test_cache_events_degradations_and_trace_facts_read_in_words():
    # then
    assert cache_event_label("epoch", True, "l1") == "缓存版本（进程内存）：命中"
    assert cache_event_label("epoch", False, "l3") == "缓存版本（数据库）：未命中"
    assert cache_event_label("query_embedding", False, "embedding") == "问题向量：未命中"
    assert cache_event_label("doc_retrieval", True, "doc") == "文档检索结果：命中"
    assert degradation_label("dense_failed:original") == "语义检索失败（原问题）"
    assert degradation_label("rerank_failed") == "重排失败"
    assert mode_label("hybrid") == "混合检索（语义 + 关键词）" and mode_label("dense") == "语义检索"
    assert document_filter_label("none") == "无（所有文档都已就绪）"
    assert empty_reason_label("no_ready_documents") == "没有已就绪的文档"
    assert content_type_label("table") == "表格" and content_type_label("text") == "文本"
    assert stage_label("channel:sparse:original") == "关键词检索（原问题）"
    assert note_label("dynamic_top_k:3") == "动态返回条数：保留 3 条"


def test_words_follow_the_active_language():
    # when
    with translation.override("en"):
        channel = channel_label("dense:original")
        event = cache_event_label("epoch", True, "l1")
        mode = mode_label("sparse")
    # then
    assert channel == "Semantic search (original question)"
    assert event == "Cache epoch (process memory): hit"
    assert mode == "Keyword search"


def test_a_whole_trace_is_described_with_its_codes_alongside():
    # given
    trace = RetrievalTrace(
        kb_id=1, version=1, cache_epoch=25, mode="hybrid", query_variants=("保修多久？",), ready_document_count=9,
        document_filter="not_in", candidate_counts={"dense:original": 30, "fused": 30},
        stage_timings=(StageTiming("recall", 5.4), StageTiming("channel:dense:original", 4.1)),
        channel_errors=(ChannelError("sparse:original", "vector_store_unavailable", "关键词检索暂时不可用。"),),
        degradations=("sparse_failed:original",),
        cache=CacheSummary(True, 1, 1, (CacheEvent("epoch", True, "l1"), CacheEvent("doc_retrieval", False, "doc"))),
        notes=("rerank_unavailable",), fusion="none",
    )
    # when
    described = describe_trace(trace)
    # then
    assert described["mode"] == "混合检索（语义 + 关键词）"
    assert described["document_filter"] == "排除未就绪的文档"
    assert described["fusion"] == "未融合（只有一路结果）"
    assert described["degradations"] == [("关键词检索失败（原问题）", "sparse_failed:original")]
    assert described["channel_errors"] == [
        ("关键词检索（原问题）", "sparse:original", "vector_store_unavailable", "关键词检索暂时不可用。")
    ]
    assert described["stages"] == [("召回（各通道并行）", "recall", 5.4), ("语义检索（原问题）", "channel:dense:original", 4.1)]
    assert described["counts"] == [("语义检索（原问题）", "dense:original", 30), ("融合后", "fused", 30)]
    assert described["cache_events"] == [
        ("缓存版本（进程内存）：命中", "epoch/l1:hit", True), ("文档检索结果：未命中", "doc_retrieval/doc:miss", False),
    ]
    assert described["notes"] == [("本地模型没有能提升效果的重排模型，未重排", "rerank_unavailable")]
