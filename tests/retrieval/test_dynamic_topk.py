"""Dynamic top-k after rerank: the cut itself at its edges, then a retrieval that uses it, on real
components (ingestion into Milvus Lite, the OpenAI-compatible reranker through the `openai` SDK at
the fake server on 127.0.0.1)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.urls import reverse

from retrieval.contracts import RetrievalRequest
from retrieval.dynamic_topk import MAX_KEPT, Cliff, cut_at_cliff, find_cliff
from retrieval.factory import build_retrieval_service
from retrieval.labels import dynamic_top_k_label
from tests.fakes.provider_server import Fail, RerankResults
from tests.retrieval.pages import visible_text

from .remote import QUESTION, published_kb

# --- the cut ------------------------------------------------------------------------------------


def test_ties_are_no_cliff():
    # given: equal scores, then a plateau after a small step
    flat, plateau = [0.7] * 6, [0.9, 0.9, 0.8, 0.8, 0.8]

    # when / then
    assert find_cliff(flat) == Cliff(kept=6)
    assert cut_at_cliff(plateau) == 5


@pytest.mark.parametrize(
    ("scores", "kept"),
    [
        ([0.8, 0.6, 0.59], 3),  # a drop of exactly 25 %: not more than 25 %
        ([0.8, 0.5999, 0.59], 1),  # just over 25 %
        ([1.0, 0.75, 0.5625], 3),  # 25 % twice over
        ([3.0, 2.5, 2.0], 3),  # exactly 0.5, and under 25 %: no cliff
        ([3.0, 2.4999, 2.4], 1),  # just over 0.5
    ],
    ids=["exactly-25%", "over-25%", "25%-twice", "exactly-0.5", "over-0.5"],
)
def test_the_thresholds_are_strict(scores, kept):
    assert cut_at_cliff(scores) == kept


def test_a_cliff_says_where_and_why():
    # when
    relative = find_cliff([0.9, 0.88, 0.85, 0.4, 0.38])
    absolute = find_cliff([3.0, 2.9, 2.3, 2.2])

    # then: `index` is the first score dropped, `before` / `after` the scores either side
    assert relative == Cliff(kept=3, index=3, before=0.85, after=0.4, kind="relative")
    assert absolute == Cliff(kept=2, index=2, before=2.9, after=2.3, kind="absolute")


def test_at_most_ten_are_kept_whatever_else_is_asked():
    # given: fifteen scores without a cliff
    scores = [1.0 - i * 0.01 for i in range(15)]

    # when / then: the default ceiling is 10; a smaller one is honoured
    assert MAX_KEPT == 10
    assert find_cliff(scores) == Cliff(kept=10)
    assert cut_at_cliff(scores, max_k=4) == 4
    # a cliff after the tenth score is never looked at
    assert cut_at_cliff([*[0.9] * 10, 0.1]) == 10


def test_negative_scores_cut_only_on_the_absolute_drop():
    # given: reranker logits below zero, where a share of the previous score says nothing
    assert cut_at_cliff([-0.1, -0.3, -0.45]) == 3  # drops of 0.2 and 0.15
    assert find_cliff([-0.2, -0.8, -0.9]) == Cliff(kept=1, index=1, before=-0.2, after=-0.8, kind="absolute")
    # from positive to negative: the relative drop counts, from the positive score
    assert find_cliff([0.2, -0.1]) == Cliff(kept=1, index=1, before=0.2, after=-0.1, kind="relative")
    # a zero score has no share either
    assert cut_at_cliff([0.0, -0.4]) == 2


def test_nothing_to_cut():
    assert find_cliff([]) == Cliff(kept=0)
    assert find_cliff([0.4]) == Cliff(kept=1)
    assert cut_at_cliff([0.9, 0.1], max_k=0) == 0


def test_the_cut_in_words():
    # when
    cut = dynamic_top_k_label({"kept": 2, "max_k": 10, "scored": 14, "cut_index": 2, "score_before": 0.88,
                               "score_after": 0.3, "cliff": "relative"})
    none = dynamic_top_k_label({"kept": 10, "max_k": 10, "scored": 14, "cut_index": None, "score_before": None,
                                "score_after": None, "cliff": ""})

    # then
    assert cut == "动态返回条数：保留 2 条（最多 10 条），从第 3 条起截断：重排分 0.8800 → 0.3000，比上一条下降超过 25%"
    assert none == "动态返回条数：保留 10 条（最多 10 条），重排分没有明显落差"


# --- in a retrieval -------------------------------------------------------------------------------


def flat_scores(count: int) -> list[dict]:
    return [{"index": i, "relevance_score": round(0.95 - i * 0.01, 2)} for i in range(count)]


@pytest.mark.django_db(transaction=True)
def test_a_reranked_retrieval_keeps_up_to_ten_whatever_top_k_and_records_the_cut(
    openai_provider, milvus, run_tasks, media_root, staff_user
):
    # given: more than ten candidates, and a reranker that scores them flat, then with a cliff
    kb = published_kb(actor=staff_user)
    service = build_retrieval_service(kb)
    base = RetrievalRequest(kb_id=kb.pk, question=QUESTION, top_k=3, candidate_k=30, enable_rerank=True,
                            dynamic_top_k=True, use_cache=False)
    candidates = service.retrieve(replace(base, enable_rerank=False, dynamic_top_k=False))
    fused = candidates.trace.candidate_counts["fused"]
    assert fused > MAX_KEPT
    cliff = [{"index": 0, "relevance_score": 0.92}, {"index": 1, "relevance_score": 0.9},
             {"index": 2, "relevance_score": 0.31}, {"index": 3, "relevance_score": 0.3}]
    openai_provider.enqueue("openai.rerank", RerankResults(flat_scores(fused)), RerankResults(cliff),
                          RerankResults(flat_scores(fused)))

    # when: top_k 3 with flat scores, top_k 3 with a cliff after two, top_k 20 with flat scores
    flat = service.retrieve(base)
    cut = service.retrieve(base)
    wide = service.retrieve(replace(base, top_k=20))

    # then: the count is the cut's, up to 10, not top_k's
    assert len(flat.results) == len(wide.results) == MAX_KEPT
    assert len(cut.results) == 2
    assert [r.rerank_score for r in cut.results] == [0.92, 0.9]
    # then: the trace records the kept count, the maximum and where it cut
    assert flat.trace.dynamic_top_k.as_dict() == {
        "kept": 10, "max_k": 10, "scored": fused, "cut_index": None, "score_before": None, "score_after": None,
        "cliff": "",
    }
    assert cut.trace.dynamic_top_k.as_dict() == {
        "kept": 2, "max_k": 10, "scored": 4, "cut_index": 2, "score_before": 0.9, "score_after": 0.31,
        "cliff": "relative",
    }
    assert "dynamic_top_k:2" in cut.trace.notes
    assert cut.trace.as_dict()["dynamic_top_k"]["cut_index"] == 2


@pytest.mark.django_db(transaction=True)
def test_a_failed_rerank_falls_back_to_the_fixed_top_k(openai_provider, milvus, run_tasks, media_root, staff_user):
    # given: the reranker answers with an error
    kb = published_kb(actor=staff_user)
    openai_provider.enqueue("openai.rerank", Fail(500))

    # when
    response = build_retrieval_service(kb).retrieve(RetrievalRequest(
        kb_id=kb.pk, question=QUESTION, top_k=3, enable_rerank=True, dynamic_top_k=True, use_cache=False,
    ))

    # then: fusion order, top_k results, no cut recorded
    assert response.trace.degradations == ("rerank_failed",)
    assert len(response.results) == 3
    assert response.trace.dynamic_top_k is None


@pytest.mark.django_db(transaction=True)
def test_the_hit_test_page_says_where_the_cut_was(openai_provider, milvus, run_tasks, media_root, staff_user, client):
    # given: a reranker with a cliff after the second candidate
    kb = published_kb(actor=staff_user)
    openai_provider.enqueue("openai.rerank", RerankResults([
        {"index": 0, "relevance_score": 0.92}, {"index": 1, "relevance_score": 0.9},
        {"index": 2, "relevance_score": 0.31},
    ]))
    client.force_login(staff_user)

    # when
    page = client.post(reverse("hit-test", args=[kb.pk]), {
        "question": QUESTION, "mode": "hybrid", "top_k": 5, "candidate_k": 30, "enable_rerank": "on",
        "dynamic_top_k": "on",
    })

    # then
    assert page.status_code == 200
    words = visible_text(page.content.decode())
    assert "结果（2）" in words
    assert "动态返回条数：保留 2 条（最多 10 条），从第 3 条起截断：重排分 0.9000 → 0.3100，比上一条下降超过 25%" in words
