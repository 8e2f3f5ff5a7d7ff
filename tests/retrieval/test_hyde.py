"""HyDE as a retrieval channel, on real components: a knowledge base built through ingestion into
Milvus Lite, and the chat model (and, where named, the embedder) of the OpenAI-compatible
provider reached through the `openai` SDK at the fake server on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from engines.lexical import fold_characters
from retrieval.contracts import RetrievalRequest
from retrieval.factory import build_retrieval_service
from retrieval.service import HYDE_PROMPT
from tests.fakes.provider_server import Answer, Fail
from tests.retrieval.pages import visible_text

from .remote import QUESTION, chat_bodies, embedded_texts, published_kb

pytestmark = pytest.mark.django_db(transaction=True)

HYPOTHESIS = "星河X3 路由器的保修期为 24 个月，保修期内可免费更换。"


def hyde_request(kb, **changes) -> RetrievalRequest:
    return RetrievalRequest(kb_id=kb.pk, question=QUESTION, top_k=5, enable_hyde=True, use_cache=False, **changes)


def test_hyde_embeds_the_question_with_the_hypothesis_and_fuses_its_list(
    settings, openai_provider, milvus, run_tasks, media_root, staff_user
):
    # given: a knowledge base embedded by the remote model, so every embedding goes over the wire
    settings.RAG_EMBEDDING_MODEL = "text-embedding-3-small"
    settings.RAG_EMBEDDING_DIMENSION = 1536
    kb = published_kb(actor=staff_user)
    embedded_before = len(embedded_texts(openai_provider))
    openai_provider.enqueue("openai.chat", Answer(text=HYPOTHESIS), Answer(text=HYPOTHESIS))
    service = build_retrieval_service(kb)

    # when: with the deployment's fusion, then with the reference design's RRF k=60
    convex = service.retrieve(hyde_request(kb))
    rrf = service.retrieve(hyde_request(kb, fusion="rrf"))

    # then: the model was asked for a hypothetical answer to the question, once per retrieval
    prompts = [body["messages"][-1]["content"] for body in chat_bodies(openai_provider)]
    assert prompts == [HYDE_PROMPT.format(question=QUESTION)] * 2
    # then: the HyDE vector is of the question and the hypothesis together, never of the guess
    # alone (folded as every query is: full-width punctuation as half-width)
    embedded = embedded_texts(openai_provider)[embedded_before:]
    assert embedded.count(fold_characters(f"{QUESTION}\n{HYPOTHESIS}")) == 2
    assert fold_characters(HYPOTHESIS) not in embedded
    # then: its list is fused with the question's own channels
    for response, fusion in ((convex, "convex(minmax, dense=0.5)"), (rrf, "rrf(k=60)")):
        trace = response.trace
        assert trace.fusion == fusion
        assert trace.candidate_counts["dense:hyde"] > 0
        assert any("dense:hyde" in r.rank_sources for r in response.results)
        assert any("sparse:original" in r.rank_sources for r in response.results)
        assert "channel:dense:hyde" in {t.stage for t in trace.stage_timings}
        assert trace.degradations == ()
        # then: the trace says that it ran, with which model, how long it took and how long the
        # text was, and keeps the text itself out
        assert (trace.hyde.status, trace.hyde.ran, trace.hyde.model) == ("ran", True, "openai:fake-chat")
        assert trace.hyde.hypothesis_chars == len(HYPOTHESIS)
        assert trace.hyde.embedded == "question+hypothesis"
        assert trace.hyde.elapsed_ms > 0
        assert HYPOTHESIS not in json.dumps(trace.as_dict(), ensure_ascii=False)


def test_a_failed_hyde_call_is_a_degradation_and_the_question_still_answers(
    openai_provider, milvus, run_tasks, media_root, staff_user
):
    # given: the chat model answers the HyDE prompt with a server error
    kb = published_kb(actor=staff_user)
    openai_provider.enqueue("openai.chat", Fail(503, message="upstream exploded"))

    # when
    response = build_retrieval_service(kb).retrieve(hyde_request(kb))

    # then: the question's own channels answer, and the trace says what was done without
    trace = response.trace
    assert response.results and response.results[0].document_title
    assert not any("dense:hyde" in r.rank_sources for r in response.results)
    assert trace.degradations == ("hyde_failed",)
    (error,) = trace.channel_errors
    assert (error.channel, error.error) == ("dense:hyde", "provider_unavailable")
    assert "假设答案" in error.message and "upstream exploded" not in error.message
    assert (trace.hyde.status, trace.hyde.ran, trace.hyde.error) == ("failed", False, "provider_unavailable")
    assert trace.hyde.model == "openai:fake-chat" and trace.hyde.hypothesis_chars == 0


def test_an_empty_hypothesis_adds_no_list_and_says_so(openai_provider, milvus, run_tasks, media_root, staff_user):
    # given: the model writes nothing
    kb = published_kb(actor=staff_user)
    openai_provider.enqueue("openai.chat", Answer(text="   "))

    # when
    response = build_retrieval_service(kb).retrieve(hyde_request(kb))

    # then
    assert response.results
    assert response.trace.hyde.status == "empty"
    assert response.trace.degradations == ()
    assert not any("dense:hyde" in r.rank_sources for r in response.results)


def test_the_local_provider_never_runs_hyde(provider_server, milvus, run_tasks, media_root, staff_user):
    # given: the offline provider, whose extractive model cannot write a hypothetical answer
    kb = published_kb(actor=staff_user)
    service = build_retrieval_service(kb)

    # when: asked for anyway
    response = service.retrieve(hyde_request(kb))

    # then: noted as unavailable, nothing failed, no model asked
    assert service.hyde_model is None
    assert "hyde_unavailable" in response.trace.notes
    assert response.trace.hyde is None and response.trace.degradations == ()
    assert response.results
    assert provider_server.requests() == []


def test_the_explain_api_and_the_hit_test_report_hyde(
    openai_provider, milvus, run_tasks, media_root, staff_user, staff_api, client
):
    # given
    kb = published_kb(actor=staff_user)
    openai_provider.enqueue("openai.chat", Answer(text=HYPOTHESIS), Answer(text=HYPOTHESIS))

    # when
    explained = staff_api.post("/api/retrieval/explain", {
        "knowledge_base_id": kb.slug, "question": QUESTION, "enable_hyde": True, "enable_query_rewrite": False,
    }, format="json")
    client.force_login(staff_user)
    page = client.post(reverse("hit-test", args=[kb.pk]), {
        # top_k differs from the API call's: not served from its cache entry
        "question": QUESTION, "mode": "hybrid", "top_k": 4, "candidate_k": 30, "enable_hyde": "on",
    })

    # then: the API's trace has the block, without the text
    assert explained.status_code == 200
    hyde = explained.json()["trace"]["hyde"]
    assert hyde == {"status": "ran", "ran": True, "model": "openai:fake-chat", "elapsed_ms": hyde["elapsed_ms"],
                    "hypothesis_chars": len(HYPOTHESIS), "embedded": "question+hypothesis", "error": ""}
    assert HYPOTHESIS not in explained.content.decode()
    # then: the hit test says it in words
    assert page.status_code == 200
    words = visible_text(page.content.decode())
    assert "已使用假设答案检索：模型 openai:fake-chat 用时" in words
    assert f"写出 {len(HYPOTHESIS)} 字，与原问题一起向量化" in words
