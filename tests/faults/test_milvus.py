"""Milvus Lite killed (SIGKILL) between requests and in the middle of one, for dense-only,
sparse-only and hybrid retrieval and for a chat turn; restarted, and the next request is served.

One channel failing lets the other continue; all recall channels failing is an
error, here `retrieval_unavailable` (503) with the failed channels listed. A chat turn that
cannot retrieve ends in the same coded error, stored as a failed turn with no evidence.
"""

from __future__ import annotations

import threading

import pytest

from chat.models import ChatEvidence, Message, MessageStatus, QueryTrace, TraceStatus
from knowledge.models import DocumentStatus, KnowledgeBaseVersion, VersionStatus
from tests.chat.conftest import RAG_QUESTION
from tests.fakes.provider_server import Held, Reply

pytestmark = pytest.mark.django_db(transaction=True)

MODES = {"dense": {"dense"}, "sparse": {"sparse"}, "hybrid": {"dense", "sparse"}}
# Different questions per request: a repeated one would be answered from the L2 cache.
QUESTIONS = ["星河X5 的推荐覆盖面积是多少？", "VPN 空闲多久会断开？", "域账号密码多久修改一次？"]


def explain(client, kb, question, **options):
    return client.post(
        "/api/retrieval/explain",
        {"knowledge_base_id": kb.slug, "question": question, **options},
        format="json",
    )


def assert_active_version_untouched(kb):
    kb.refresh_from_db()
    assert kb.active_version.status == VersionStatus.ACTIVE
    assert all(d.status == DocumentStatus.READY for d in kb.active_version.documents.all())
    assert not KnowledgeBaseVersion.objects.filter(knowledge_base=kb, status=VersionStatus.BUILDING).exists()


def test_killed_between_requests_every_mode_fails_with_a_coded_503_then_serves_after_restart(
    killable_kb, killable_milvus, anonymous_api
):
    # given: every mode answers
    for mode in MODES:
        assert explain(anonymous_api, killable_kb, RAG_QUESTION, mode=mode).status_code == 200

    # when: Milvus dies
    killable_milvus.kill()
    down = {mode: explain(anonymous_api, killable_kb, QUESTIONS[0], mode=mode) for mode in MODES}

    # then: each mode is a coded 503 naming exactly the channels it tried
    for mode, response in down.items():
        assert response.status_code == 503, (mode, response.content)
        body = response.json()
        assert body["code"] == "retrieval_unavailable"
        assert {e["channel"].split(":")[0] for e in body["channel_errors"]} == MODES[mode]
        assert {e["error"] for e in body["channel_errors"]} == {"vector_store_unavailable"}
        assert killable_milvus.address not in response.content.decode()
    assert_active_version_untouched(killable_kb)

    # when: it comes back
    killable_milvus.restart()
    up = {mode: explain(anonymous_api, killable_kb, QUESTIONS[1], mode=mode) for mode in MODES}

    # then: the next request of every mode is served, undegraded
    for mode, response in up.items():
        assert response.status_code == 200, (mode, response.content)
        assert response.json()["results"], mode
        assert response.json()["trace"]["degradations"] == []


def test_killed_during_a_retrieval_the_request_ends_in_the_coded_error(
    killable_kb, killable_milvus, openai_provider, member_api
):
    # given: the query rewrite (before recall, an option of signed-in users) is held until Milvus is killed
    rewrite = {"choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": '{"rewrite": "星河X3 路由器的保修期有多长？"}'}}]}
    released = threading.Event()
    openai_provider.enqueue("openai.chat", Held(released, then=Reply(json_body=rewrite)))
    responses = []
    request = threading.Thread(target=lambda: responses.append(
        explain(member_api, killable_kb, RAG_QUESTION, mode="hybrid", enable_query_rewrite=True)
    ))

    # when: Milvus dies while the request waits for the rewrite (held until then)
    request.start()
    try:
        assert _eventually(lambda: openai_provider.requests("openai.chat") or responses), "the rewrite was never asked"
        assert not responses, responses[0].content
        killable_milvus.kill()
    finally:
        released.set()
    request.join(timeout=60)

    # then
    assert not request.is_alive(), "the request hung"
    response = responses[0]
    assert response.status_code == 503
    assert response.json()["code"] == "retrieval_unavailable"
    assert {e["channel"] for e in response.json()["channel_errors"]} >= {"dense:original", "sparse:original"}

    # then: after a restart the same question is served (nothing degraded was cached)
    killable_milvus.restart()
    again = explain(member_api, killable_kb, RAG_QUESTION, mode="hybrid")
    assert again.status_code == 200 and again.json()["results"]


def test_chat_turn_with_milvus_gone_is_a_coded_failed_turn_then_the_next_is_answered(
    killable_kb, killable_milvus, anonymous_api
):
    # given
    killable_milvus.kill()

    # when
    response = anonymous_api.post(
        "/api/chat", {"knowledge_base_id": killable_kb.slug, "question": RAG_QUESTION}, format="json"
    )

    # then: a coded 503, a failed trace that says why, and no evidence or answer marked complete
    assert response.status_code == 503, response.content
    assert response.json()["code"] == "retrieval_unavailable"
    trace = QueryTrace.objects.get()
    assert (trace.status, trace.error_code) == (TraceStatus.FAILED, "retrieval_unavailable")
    assert "faq_search_failed" in trace.degradations
    assert trace.assistant_message.status == MessageStatus.ERROR
    assert not ChatEvidence.objects.exists()
    assert not Message.objects.filter(role="assistant", status=MessageStatus.COMPLETE).exists()
    assert_active_version_untouched(killable_kb)

    # when: Milvus is back
    killable_milvus.restart()
    answered = anonymous_api.post(
        "/api/chat", {"knowledge_base_id": killable_kb.slug, "question": RAG_QUESTION}, format="json"
    )

    # then
    assert answered.status_code == 200, answered.content
    assert "24 个月" in answered.json()["answer"]
    assert ChatEvidence.objects.count() == 1


def test_chat_turn_with_milvus_killed_mid_turn_stores_no_evidence(
    killable_kb, killable_milvus, openai_provider, member_api
):
    # given: the turn's document retrieval waits for a rewrite (after the FAQ search)
    rewrite = {"choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": '{"rewrite": "星河X3 路由器的保修期有多长？"}'}}]}
    released = threading.Event()
    openai_provider.enqueue("openai.chat", Held(released, then=Reply(json_body=rewrite)))
    responses = []
    turn = threading.Thread(target=lambda: responses.append(member_api.post(
        "/api/chat",
        {"knowledge_base_id": killable_kb.slug, "question": RAG_QUESTION, "enable_query_rewrite": True},
        format="json",
    )))

    # when: Milvus dies while the turn waits for the rewrite (held until then)
    turn.start()
    try:
        assert _eventually(lambda: openai_provider.requests("openai.chat") or responses), "the rewrite was never asked"
        assert not responses, responses[0].content
        killable_milvus.kill()
    finally:
        released.set()
    turn.join(timeout=60)

    # then
    assert not turn.is_alive(), "the turn hung"
    assert responses[0].status_code == 503
    assert responses[0].json()["code"] == "retrieval_unavailable"
    trace = QueryTrace.objects.get()
    assert (trace.status, trace.error_code) == (TraceStatus.FAILED, "retrieval_unavailable")
    assert not ChatEvidence.objects.exists()
    assert trace.assistant_message.status == MessageStatus.ERROR


def _eventually(predicate, within: float = 20.0):
    import time

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return predicate()
