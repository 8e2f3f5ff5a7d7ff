"""Knowledge bases of different embedding spaces in one question: each space searched by its own
service, the lists merged on calibrated relevance, every base accounted for in the trace."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from retrieval.cache import DjangoRetrievalCache
from retrieval.contracts import RetrievalRequest
from retrieval.federation import FederatedRetrieval, grouped_by_space
from retrieval.service import RetrievalService

from .fakes import FakeEmbedder, FakeRepository, FakeRewriter, FakeStore, chunk

HR = {1: chunk(1, 10, "年假天数：入职满一年的员工每年享有 15 天带薪年假。"),
      2: chunk(2, 10, "病假需要提供医院证明。", ordinal=1)}
IT = {3: chunk(3, 20, "VPN 客户端安装后使用公司邮箱账号登录。"),
      4: chunk(4, 20, "年假期间 VPN 账号保持可用。", ordinal=1)}


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


def service(chunks: dict, ready: set[int], *, version: int) -> RetrievalService:
    repository = FakeRepository(chunks=dict(chunks), ready=ready, version=version)
    return RetrievalService(
        repository=repository, embedder=FakeEmbedder(), store=FakeStore(repository.chunks),
        rewriter=FakeRewriter(None), reranker=None, cache=DjangoRetrievalCache(),
        epochs=lambda kb_id: (kb_id * 10, True),
    )


def test_spaces_are_searched_apart_and_ranked_together_by_relevance():
    # given: two knowledge bases that cannot share a search
    federated = FederatedRetrieval(members=(
        (service(IT, {20}, version=4), (2,)),
        (service(HR, {10}, version=7), (1,)),
    ))

    # when: asked with the IT base first
    response = federated.retrieve(RetrievalRequest(kb_id=2, question="年假天数是多少", top_k=3, mode="hybrid"))

    # then: the handbook's answer leads whatever base was asked first; each result names its base
    top = response.results[0]
    assert (top.chunk_id, top.kb_id) == (1, 1)
    assert [r.relevance for r in response.results] == sorted((r.relevance for r in response.results), reverse=True)
    assert {r.kb_id for r in response.results} == {1, 2}
    assert len(response.results) == 3
    # and: the trace is the first base's, with every base's version, epoch and READY count
    trace = response.trace
    assert trace.kb_id == 2 and trace.ready_document_count == 2
    assert [(kb.kb_id, kb.version, kb.cache_epoch, kb.ready_document_count) for kb in trace.knowledge_bases] == [
        (2, 4, 20, 1), (1, 7, 10, 1)
    ]


def test_a_base_with_nothing_ready_does_not_empty_the_others():
    federated = FederatedRetrieval(members=(
        (service(IT, set(), version=1), (2,)),
        (service(HR, {10}, version=1), (1,)),
    ))
    response = federated.retrieve(RetrievalRequest(kb_id=2, question="年假有多少天", top_k=2))
    assert response.results and response.trace.empty_reason == ""
    assert [kb.empty_reason for kb in response.trace.knowledge_bases] == ["no_ready_documents", ""]


def test_groups_keep_the_given_order():
    kbs = [("a", "e5"), ("b", "hash"), ("c", "e5"), ("d", "hash"), ("e", "bge")]
    groups = grouped_by_space(kbs, space=lambda kb: kb[1])
    assert [[kb[0] for kb in group] for group in groups] == [["a", "c"], ["b", "d"], ["e"]]


def test_a_chosen_version_belongs_to_one_knowledge_base():
    with pytest.raises(ValueError):
        RetrievalRequest(kb_id=1, question="年假", version_id=3, also_kb_ids=(2,))
