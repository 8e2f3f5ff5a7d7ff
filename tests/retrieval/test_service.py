"""RetrievalService semantics with fault-injecting fake ports."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.cache import cache

from retrieval.cache import DjangoRetrievalCache
from retrieval.contracts import AllChannelsFailed, FactsUnavailable, RetrievalCancelled, RetrievalRequest
from engines.ports import RerankScore, VectorHit
from retrieval.service import RetrievalService

from .fakes import FakeEmbedder, FakeRepository, FakeReranker, FakeRewriter, FakeStore, chunk

CHUNKS = {
    1: chunk(1, 10, "年假天数：入职满一年的员工每年享有 15 天带薪年假。", ordinal=0),
    2: chunk(2, 10, "病假需要提供医院证明，三天以内由直属主管审批。", ordinal=1),
    3: chunk(3, 20, "VPN客户端安装后使用公司邮箱账号登录。", ordinal=0),
    4: chunk(4, 20, "打印机卡纸时先关闭电源，再取出纸张。", ordinal=1),
    5: chunk(5, 30, "草稿文档：年假将调整为 20 天。", ordinal=0),  # not READY
}


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


NO_RERANKER = object()


def make_service(*, repository=None, store=None, rewriter=None, reranker=None, epochs=None, embedder=None,
                 hyde_model=None, dictionary=()):
    repository = repository or FakeRepository(chunks=dict(CHUNKS), ready={10, 20}, other={30})
    embedder = embedder or FakeEmbedder()
    return RetrievalService(
        repository=repository,
        embedder=embedder,
        store=store or FakeStore(repository.chunks, embedder=FakeEmbedder()),
        rewriter=rewriter or FakeRewriter(None),
        reranker=None if reranker is NO_RERANKER else (reranker or FakeReranker()),
        hyde_model=hyde_model,
        cache=DjangoRetrievalCache(),
        epochs=epochs,
        dictionary=dictionary,
    )


def request(question="年假有多少天", **changes):
    return RetrievalRequest(kb_id=1, question=question, **changes)


def test_hybrid_finds_the_answer_and_records_sources():
    response = make_service().retrieve(request(top_k=3))
    top = response.results[0]
    assert top.chunk_id == 1
    assert set(top.rank_sources) == {"dense:original", "sparse:original"}
    assert response.trace.query_variants == ("年假有多少天",)
    assert response.trace.degradations == ()
    assert {t.stage for t in response.trace.stage_timings} >= {"facts", "recall", "fusion", "channel:dense:original", "channel:sparse:original"}


def test_draft_or_failed_documents_never_appear_even_if_vectors_exist():
    # given: the store holds vectors of document 30 (not READY) and answers with them regardless
    repository = FakeRepository(chunks=dict(CHUNKS), ready={10, 20}, other={30})
    store = FakeStore(repository.chunks)
    store._allowed = lambda document_id, documents: True  # a store that ignores the pushed-down filter
    # when
    response = make_service(repository=repository, store=store).retrieve(request("年假 20 天", top_k=5))
    # then
    assert all(r.document_id in {10, 20} for r in response.results)
    assert 5 not in [r.chunk_id for r in response.results]


def test_a_document_the_facts_only_counted_is_confirmed_before_it_may_answer():
    # given: every document the facts saw may answer, more than are listed (so none is listed
    # and nothing is pushed down), and the store holds vectors of document 30, created after
    repository = FakeRepository(chunks=dict(CHUNKS), ready={10, 20}, unseen={30}, listed_ready=0)
    store = FakeStore(repository.chunks)
    # when
    response = make_service(repository=repository, store=store).retrieve(request("年假 20 天", top_k=5))
    # then
    assert {c[1].exclude for c in store.calls} == {()}
    assert "confirm_ready" in repository.calls
    assert response.results and all(r.document_id in {10, 20} for r in response.results)
    assert 5 not in [r.chunk_id for r in response.results]


def test_the_database_lost_while_confirming_candidates_fails_the_search_without_results():
    # given: the facts were read; the database goes away before the candidates are confirmed
    repository = FakeRepository(chunks=dict(CHUNKS), ready={10, 20}, other={30}, listed_ready=0,
                                fail_confirm=True)
    # when / then: the error retrieval callers answer as "facts unavailable", never a partial list
    with pytest.raises(FactsUnavailable):
        make_service(repository=repository).retrieve(request("年假", top_k=5))
    assert "confirm_ready" in repository.calls


def test_empty_facts_return_at_once_without_models_or_store():
    # given
    repository = FakeRepository(chunks=dict(CHUNKS), ready=set(), other={10, 20, 30})
    embedder, store, rewriter = FakeEmbedder(), FakeStore(CHUNKS), FakeRewriter("改写")
    service = make_service(repository=repository, store=store, rewriter=rewriter, embedder=embedder)
    # when
    response = service.retrieve(request(enable_query_rewrite=True))
    # then
    assert response.results == ()
    assert response.trace.empty_reason == "no_ready_documents"
    assert embedder.calls == 0 and rewriter.calls == 0 and store.calls == []


def test_document_ids_are_intersected_with_ready_facts():
    service = make_service()
    only_20 = service.retrieve(request("年假", document_ids=(20, 30)))
    assert {r.document_id for r in only_20.results} == {20}
    none = service.retrieve(request("年假", document_ids=(30,)))
    assert none.results == () and none.trace.empty_reason == "document_ids_not_ready"


def test_filter_pushdown_uses_the_shorter_expression():
    # given: 2 ready, 1 other → "not in [30]"
    store = FakeStore(CHUNKS)
    make_service(store=store).retrieve(request())
    assert {c[1].exclude for c in store.calls} == {(30,)}
    # given: 1 ready, 2 others → "in [10]"
    repository = FakeRepository(chunks=dict(CHUNKS), ready={10}, other={20, 30})
    store = FakeStore(repository.chunks)
    response = make_service(repository=repository, store=store).retrieve(request())
    assert {c[1].include for c in store.calls} == {(10,)}
    assert response.trace.document_filter == "in"


def test_channels_run_concurrently():
    # given: each channel waits for the other; sequential execution would time out
    barrier = threading.Barrier(2, timeout=5)
    store = FakeStore(CHUNKS)
    store.before_search = lambda kind: barrier.wait()
    # when
    response = make_service(store=store).retrieve(request(mode="hybrid"))
    # then
    assert response.trace.degradations == ()
    assert len(response.results) > 0


def test_rewrite_adds_one_variant_after_the_original():
    rewriter = FakeRewriter("带薪年假天数")
    response = make_service(rewriter=rewriter).retrieve(request(enable_query_rewrite=True))
    assert response.trace.query_variants == ("年假有多少天", "带薪年假天数")
    sources = {s for r in response.results for s in r.rank_sources}
    assert {"dense:rewrite", "sparse:rewrite"} <= sources


def test_an_english_question_also_searches_the_chinese_words_it_names():
    # given: the VPN chunk is Chinese, the question English
    # when
    response = make_service().retrieve(request("How do I log in to the VPN client?", top_k=3))
    # then: its Chinese words are one more variant, searched by keywords only, and find the chunk
    assert len(response.trace.query_variants) == 2
    assert "客户端" in response.trace.query_variants[1].split()
    assert "sparse:chinese" in response.trace.candidate_counts
    assert "dense:chinese" not in response.trace.candidate_counts
    assert response.results[0].chunk_id == 3


def test_a_chinese_question_gets_no_rendering():
    response = make_service().retrieve(request("年假有多少天"))
    assert not any(name.endswith(":chinese") for name in response.trace.candidate_counts)


def test_a_traditional_question_is_embedded_as_the_index_folds_it():
    # given
    embedder = FakeEmbedder()
    seen = []
    embed = embedder.embed_query
    embedder.embed_query = lambda text: (seen.append(text), embed(text))[1]
    # when
    make_service(embedder=embedder).retrieve(request("年假有幾天？", use_cache=False))
    # then
    assert seen == ["年假有几天?"]  # NFKC: the full-width question mark too


def test_rewrite_failure_continues_with_the_original():
    response = make_service(rewriter=FakeRewriter(fail=True)).retrieve(request(enable_query_rewrite=True))
    assert response.trace.degradations == ("query_rewrite_failed",)
    assert response.trace.query_variants == ("年假有多少天",)
    assert response.results[0].chunk_id == 1


def test_rewrite_identical_to_the_question_is_ignored():
    response = make_service(rewriter=FakeRewriter(" 年假有多少天 ")).retrieve(request(enable_query_rewrite=True))
    assert response.trace.query_variants == ("年假有多少天",)


def test_one_channel_failing_the_other_continues():
    store = FakeStore(CHUNKS)
    store.fail_dense = True
    response = make_service(store=store).retrieve(request())
    assert response.results[0].chunk_id == 1
    assert response.trace.degradations == ("dense_failed:original",)
    assert [e.channel for e in response.trace.channel_errors] == ["dense:original"]
    assert response.results[0].rank_sources == ("sparse:original",)


def test_embedding_failure_fails_only_the_dense_channel():
    response = make_service(embedder=FakeEmbedder(fail=True)).retrieve(request())
    assert response.trace.degradations == ("dense_failed:original",)
    assert response.results


def test_all_channels_failing_is_a_typed_error():
    store = FakeStore(CHUNKS)
    store.fail_dense = store.fail_sparse = True
    with pytest.raises(AllChannelsFailed) as error:
        make_service(store=store).retrieve(request())
    assert {e.channel for e in error.value.details} == {"dense:original", "sparse:original"}


def test_single_mode_failing_is_all_channels_failing():
    store = FakeStore(CHUNKS)
    store.fail_sparse = True
    with pytest.raises(AllChannelsFailed):
        make_service(store=store).retrieve(request(mode="sparse"))


def test_facts_store_down_is_a_typed_error():
    with pytest.raises(FactsUnavailable):
        make_service(repository=FakeRepository(chunks=dict(CHUNKS), ready={10}, fail_facts=True)).retrieve(request())


def test_rerank_reorders_and_keeps_top_k():
    # given: the fusion order of the top three candidates
    fused = [r.chunk_id for r in make_service().retrieve(request(top_k=3, candidate_k=3)).results]
    # when: the reranker puts them in the order 2, 0, 1
    response = make_service(reranker=FakeReranker(order=[2, 0, 1])).retrieve(
        request(top_k=2, candidate_k=3, enable_rerank=True)
    )
    # then
    assert [r.chunk_id for r in response.results] == [fused[2], fused[0]]
    assert [r.rerank_score for r in response.results] == [1.0, 0.9]
    assert response.results[0].score == response.results[0].rerank_score


def test_candidates_the_reranker_did_not_score_keep_fusion_order_after_it():
    fused = [r.chunk_id for r in make_service().retrieve(request(top_k=4, candidate_k=4)).results]
    response = make_service(reranker=FakeReranker(order=[3])).retrieve(
        request(top_k=4, candidate_k=4, enable_rerank=True)
    )
    assert [r.chunk_id for r in response.results] == [fused[3], fused[0], fused[1], fused[2]]
    assert [r.rerank_score for r in response.results][1:] == [None, None, None]


@pytest.mark.parametrize("bad", [[], [RerankScore(99, 1.0)], [RerankScore(0, 1.0), RerankScore(0, 0.9)]],
                         ids=["empty", "out-of-range", "duplicate"])
def test_bad_rerank_responses_keep_fusion_order(bad):
    baseline = make_service().retrieve(request(top_k=3))
    response = make_service(reranker=FakeReranker(bad=bad)).retrieve(request(top_k=3, enable_rerank=True))
    assert [r.chunk_id for r in response.results] == [r.chunk_id for r in baseline.results]
    assert response.trace.degradations == ("rerank_failed",)


def test_rerank_failure_keeps_fusion_order():
    baseline = make_service().retrieve(request(top_k=3))
    response = make_service(reranker=FakeReranker(fail=True)).retrieve(request(top_k=3, enable_rerank=True))
    assert [r.chunk_id for r in response.results] == [r.chunk_id for r in baseline.results]
    assert "rerank_failed" in response.trace.degradations
    assert all(r.rerank_score is None for r in response.results)


def test_parent_expansion_keeps_anchor_and_adds_context():
    response = make_service().retrieve(request(top_k=1, enable_parent_expansion=True))
    top = response.results[0]
    assert top.chunk_id == 1
    assert top.matched_content == CHUNKS[1].content
    assert top.context_chunk_ids == (1, 2)
    assert CHUNKS[2].content in top.content


def test_parent_expansion_failure_keeps_the_hit():
    repository = FakeRepository(chunks=dict(CHUNKS), ready={10, 20}, other={30}, fail_neighbours=True)
    response = make_service(repository=repository).retrieve(request(top_k=1, enable_parent_expansion=True))
    assert response.results[0].content == CHUNKS[1].content
    assert response.results[0].context_chunk_ids == (1,)
    assert "parent_expansion_failed" in response.trace.degradations


def test_cancellation_propagates_and_is_not_a_degradation():
    # given: channels that hang until the test releases them, and a caller that goes away
    cancel, release = threading.Event(), threading.Event()
    store = FakeStore(CHUNKS)
    store.before_search = lambda kind: release.wait(5)
    threading.Timer(0.1, cancel.set).start()
    # when / then: the service stops waiting at once instead of finishing the channels
    started = time.perf_counter()
    try:
        with pytest.raises(RetrievalCancelled):
            make_service(store=store).retrieve(request(), cancel=cancel)
        assert time.perf_counter() - started < 1.0
    finally:
        release.set()


def test_cancelled_before_start_touches_nothing_after_facts():
    cancel = threading.Event()
    cancel.set()
    store = FakeStore(CHUNKS)
    with pytest.raises(RetrievalCancelled):
        make_service(store=store).retrieve(request(), cancel=cancel)
    assert store.calls == []


def test_stale_vectors_without_rows_are_dropped():
    store = FakeStore(CHUNKS)
    store.extra_hits = [VectorHit(999, 10, 99.0)]  # a vector whose chunk row is gone
    response = make_service(store=store).retrieve(request(top_k=5))
    assert 999 not in [r.chunk_id for r in response.results]


def test_hyde_unavailable_is_noted_not_failed():
    response = make_service().retrieve(request(enable_hyde=True))
    assert "hyde_unavailable" in response.trace.notes
    assert response.trace.degradations == ()


def test_hyde_adds_a_dense_list():
    class Writer:
        name = "fake-chat"

        def complete(self, messages, **kwargs):
            return "员工每年享有 15 天带薪年假。"

    response = make_service(hyde_model=Writer()).retrieve(request(enable_hyde=True))
    assert any("dense:hyde" in r.rank_sources for r in response.results)


class Epochs:
    def __init__(self):
        self.epoch = 1

    def __call__(self, kb_id):
        return self.epoch, False


def test_cache_miss_then_hit_then_epoch_bump_misses():
    # given
    epochs = Epochs()
    store = FakeStore(CHUNKS)
    service = make_service(store=store, epochs=epochs)
    # when
    first = service.retrieve(request())
    calls_after_first = len(store.calls)
    second = service.retrieve(request())
    epochs.epoch = 2
    third = service.retrieve(request())
    # then
    doc_events = lambda r: [e.hit for e in r.trace.cache.events if e.stage == "doc_retrieval"]
    assert doc_events(first) == [False]
    assert doc_events(second) == [True]
    assert doc_events(third) == [False]
    assert len(store.calls) == calls_after_first * 2  # the hit did not touch the store
    assert [r.chunk_id for r in second.results] == [r.chunk_id for r in first.results]
    assert second.trace.cache.hit_count >= 1
    # the query embedding is reused across epochs
    assert [e.hit for e in third.trace.cache.events if e.stage == "query_embedding"] == [True]


@pytest.mark.parametrize("changes", [
    {"question": "病假怎么请"},
    {"top_k": 4},
    {"candidate_k": 20},
    {"mode": "sparse"},
    {"document_ids": (10,)},
    {"enable_rerank": True},
    {"enable_query_rewrite": True},
    {"enable_parent_expansion": True},
    {"dynamic_top_k": True},
], ids=lambda c: next(iter(c)))
def test_cache_keys_differ_by_every_request_parameter(changes):
    epochs = Epochs()
    service = make_service(epochs=epochs)
    service.retrieve(request(top_k=3))
    other = service.retrieve(request(**{"top_k": 3, **changes}))
    assert [e.hit for e in other.trace.cache.events if e.stage == "doc_retrieval"] == [False]


def test_cache_keys_differ_by_version_and_visibility_scope():
    epochs = Epochs()
    repository = FakeRepository(chunks=dict(CHUNKS), ready={10, 20}, other={30})
    service = make_service(repository=repository, epochs=epochs)
    service.retrieve(request())
    repository.version = 2
    assert [e.hit for e in service.retrieve(request()).trace.cache.events if e.stage == "doc_retrieval"] == [False]


def test_cache_hit_is_refiltered_by_current_ready_facts():
    epochs = Epochs()
    repository = FakeRepository(chunks=dict(CHUNKS), ready={10, 20}, other={30})
    service = make_service(repository=repository, epochs=epochs)
    service.retrieve(request(top_k=5))
    repository.ready = {20}
    repository.other = {10, 30}
    response = service.retrieve(request(top_k=5))
    assert [e.hit for e in response.trace.cache.events if e.stage == "doc_retrieval"] == [True]
    assert response.results and {r.document_id for r in response.results} == {20}


def test_dynamic_top_k_cuts_at_the_rerank_cliff():
    # given: rerank scores 1.0, 0.9, 0.8, ... (no cliff) then a reranker with a cliff after two
    class Cliff(FakeReranker):
        def rerank(self, query, documents, *, top_n):
            return [RerankScore(0, 0.95), RerankScore(1, 0.9), RerankScore(2, 0.2), RerankScore(3, 0.18)][: len(documents)]

    response = make_service(reranker=Cliff()).retrieve(request(top_k=4, enable_rerank=True, dynamic_top_k=True))
    assert len(response.results) == 2
    assert "dynamic_top_k:2" in response.trace.notes


def test_dynamic_top_k_without_rerank_is_noted_not_applied():
    response = make_service().retrieve(request(top_k=3, dynamic_top_k=True))
    assert len(response.results) == 3
    assert "dynamic_top_k_needs_rerank" in response.trace.notes


# --- fusion, relevance, rerank availability, dictionary ------------------------------------------


def test_hybrid_fuses_by_convex_scores_and_says_so():
    # when
    response = make_service().retrieve(request(top_k=3))

    # then
    assert response.trace.fusion == "convex(minmax, dense=0.5)"
    assert response.trace.embedding_model == "fake-embedder"
    assert response.results[0].chunk_id == 1


def test_rrf_stays_selectable_per_request_and_by_setting(settings):
    # when
    per_request = make_service().retrieve(request(top_k=3, fusion="rrf"))
    settings.RAG_FUSION = "rrf"
    by_setting = make_service().retrieve(request(top_k=3))

    # then
    assert per_request.trace.fusion == by_setting.trace.fusion == "rrf(k=60)"
    assert per_request.results[0].score == pytest.approx(2 / 61, abs=1e-6)


def test_one_channel_is_not_fused():
    assert make_service().retrieve(request(mode="sparse")).trace.fusion == "none"


def test_a_lexical_embedder_has_no_weight_in_hybrid():
    # given: the hashing embedder repeats what BM25 finds
    class LexicalEmbedder(FakeEmbedder):
        semantic = False

    # when
    response = make_service(embedder=LexicalEmbedder()).retrieve(request(top_k=3))

    # then
    assert response.trace.fusion == "convex(minmax, dense=0)"


def test_fusion_is_part_of_the_cache_key():
    # given
    service = make_service(epochs=lambda kb_id: (1, True))
    service.retrieve(request(top_k=3))

    # when
    rrf = service.retrieve(request(top_k=3, fusion="rrf"))

    # then: not served from the convex entry
    assert [e.hit for e in rrf.trace.cache.events if e.stage == "doc_retrieval"] == [False]
    assert rrf.trace.fusion == "rrf(k=60)"


def test_rerank_without_a_reranker_is_a_noted_no_op():
    # when
    response = make_service(reranker=NO_RERANKER).retrieve(request(top_k=3, enable_rerank=True, dynamic_top_k=True))

    # then
    assert "rerank_unavailable" in response.trace.notes
    assert response.trace.degradations == ()
    assert all(r.rerank_score is None for r in response.results)
    assert "rerank" not in {t.stage for t in response.trace.stage_timings}


def test_relevance_tells_an_on_topic_chunk_from_an_off_topic_question():
    # when
    on_topic = make_service().retrieve(request("年假有多少天", top_k=1, mode="sparse"))
    off_topic = make_service().retrieve(request("打印机卡纸年假", top_k=5, mode="sparse"))
    unrelated = make_service().retrieve(request("今天天气怎么样 年假", top_k=5, mode="sparse"))

    # then
    assert on_topic.results[0].relevance > 0.6
    assert all(0.0 <= r.relevance <= 1.0 for r in off_topic.results + unrelated.results)
    assert max(r.relevance for r in unrelated.results) < on_topic.results[0].relevance


def test_the_dictionary_reaches_the_sparse_channel_and_the_cache_key():
    # given
    store = FakeStore(CHUNKS)
    service = make_service(store=store, dictionary=("带薪年假",), epochs=lambda kb_id: (1, True))

    # when
    service.retrieve(request())
    other = make_service(store=FakeStore(CHUNKS), dictionary=(), epochs=lambda kb_id: (1, True)).retrieve(request())

    # then
    assert store.dictionaries == [("带薪年假",)]
    assert [e.hit for e in other.trace.cache.events if e.stage == "doc_retrieval"] == [False]
