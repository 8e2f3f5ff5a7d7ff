"""FAQ retrieval on real components: FAQ rows, the FAQ collection in Milvus, the local embedder."""

from __future__ import annotations

import threading

import pytest

from knowledge.faqs import services as faq_services
from retrieval.contracts import RetrievalCancelled
from retrieval.factory import build_faq_retrieval
from retrieval.faqs import FaqSearchRequest
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def kb_with_faqs(milvus, run_tasks, staff_user):
    kb = make_kb()
    faq_services.save_faq(kb=kb, question="年假有多少天？", similar_questions=["带薪年假怎么计算？"],
                      answer="满 1 年 7 天。", actor=staff_user)
    faq_services.save_faq(kb=kb, question="报销要在多长时间内提交？", answer="30 天内。", actor=staff_user)
    faq_services.save_faq(kb=kb, question="停用的问题", answer="不应出现", enabled=False, actor=staff_user)
    return kb


def search(kb, question, **options):
    return build_faq_retrieval(kb).search(FaqSearchRequest(kb_id=kb.pk, variants=(question,), **options))


def test_an_equal_phrasing_is_an_exact_hit_with_score_one(kb_with_faqs):
    # when: a similar question, typed with other punctuation and spaces
    response = search(kb_with_faqs, "带薪年假 怎么计算?")
    # then
    top = response.hits[0]
    assert (top.question, top.matched_question, top.exact, top.score) == ("年假有多少天？", "带薪年假怎么计算？", True, 1.0)
    assert {source.split(":")[0] for source in top.rank_sources} == {"faq_dense", "faq_sparse"}


def test_hits_are_ranked_by_similarity_and_disabled_faqs_never_appear(kb_with_faqs):
    response = search(kb_with_faqs, "年假能休几天")
    assert [hit.question for hit in response.hits][0] == "年假有多少天？"
    assert all(0.0 <= hit.score < 1.0 for hit in response.hits)
    assert "停用的问题" not in {hit.question for hit in response.hits}
    assert response.top_k == 5


def test_candidates_are_cached_under_the_epoch_and_a_faq_edit_moves_it(kb_with_faqs, staff_user):
    first = search(kb_with_faqs, "报销期限")
    second = search(kb_with_faqs, "报销期限")
    assert [e.hit for e in first.cache.events if e.stage == "faq_retrieval"] == [False]
    assert [e.hit for e in second.cache.events if e.stage == "faq_retrieval"] == [True]
    assert second.hits == first.hits
    # when: a FAQ is edited
    faq = kb_with_faqs.faqs.get(question="报销要在多长时间内提交？")
    faq_services.save_faq(kb=kb_with_faqs, faq=faq, question=faq.question, answer="60 天内。", actor=staff_user)
    # then: a miss that sees the new answer
    third = search(kb_with_faqs, "报销期限")
    assert [e.hit for e in third.cache.events if e.stage == "faq_retrieval"] == [False]
    assert third.hits[0].answer == "60 天内。"


def test_a_failing_vector_store_degrades_to_no_faq_hits(kb_with_faqs, settings):
    # given: Milvus unreachable
    from engines.milvus_store import reset_vector_store_cache

    settings.MILVUS_URI = "http://127.0.0.1:9"
    reset_vector_store_cache()
    # when
    response = search(kb_with_faqs, "年假有多少天？", use_cache=False)
    # then
    assert response.hits == ()
    assert response.degradations == ("faq_search_failed",)
    assert {e.channel.split(":")[0] for e in response.channel_errors} == {"faq_dense", "faq_sparse"}


def test_cancellation_propagates(kb_with_faqs):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(RetrievalCancelled):
        build_faq_retrieval(kb_with_faqs).search(
            FaqSearchRequest(kb_id=kb_with_faqs.pk, variants=("年假",), use_cache=False), cancel=cancel
        )


def test_a_knowledge_base_without_enabled_faqs_is_not_searched(milvus, run_tasks, staff_user, settings):
    from engines.milvus_store import reset_vector_store_cache

    # given: only a disabled FAQ, and a vector store that would fail if it were asked
    kb = make_kb()
    faq_services.save_faq(kb=kb, question="停用的问题", answer="不应出现", enabled=False, actor=staff_user)
    settings.MILVUS_URI = "http://127.0.0.1:9"
    reset_vector_store_cache()
    # when
    response = search(kb, "停用的问题")
    # then: no hits, no failure, no cache traffic
    assert (response.hits, response.degradations, response.channel_errors) == ((), (), ())
    assert response.cache.events == ()


def test_a_channel_failure_is_reported_in_the_request_language(kb_with_faqs, settings):
    from django.utils import translation

    from engines.milvus_store import reset_vector_store_cache

    settings.MILVUS_URI = "http://127.0.0.1:9"
    reset_vector_store_cache()
    with translation.override("en"):
        response = search(kb_with_faqs, "年假有多少天？", use_cache=False)
    assert {e.message for e in response.channel_errors} == {"An FAQ retrieval channel failed."}
