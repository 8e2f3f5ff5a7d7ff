"""Turn persistence: atomic answers, after-commit FAQ hits, concurrent writers (real transactions).

Meant for PostgreSQL (CI sets DATABASE_URL); on SQLite the same tests run with writers
serialised by the database lock.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import IntegrityError, connection, transaction

from chat import services
from chat.contracts import Requester
from chat.models import ChatEvidence, Conversation, Message, QueryTrace
from knowledge.faqs import services as faq_services
from knowledge.models import FAQ
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db(transaction=True)


def evidence_record() -> services.EvidenceRecord:
    return services.EvidenceRecord(
        route="retrieval", hit_type="rag", intent={"intent": "KNOWLEDGE_QUERY"}, rewritten_query="年假",
        citations=[{"number": 1}], retrieval_results=[], retrieval_trace={}, answer_confidence={"score": 0.9},
    )


def trace_record(trace_id=None) -> services.TraceRecord:
    return services.TraceRecord(trace_id=trace_id or uuid.uuid4(), kb_version=1, question="年假有几天？",
                                route="retrieval", hit_type="rag")


@pytest.fixture
def started_turn(db, member_user):
    kb = make_kb()
    conversation, _ = services.start_turn(kb=kb, requester=Requester(member_user), question="年假有几天？",
                                          conversation=None)
    return conversation


def in_threads(count: int, work) -> list:
    """Run `work(index)` in `count` threads released together; each closes its connection."""
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = work(index)
        except Exception as exc:  # noqa: BLE001 — reported to the test below
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def test_answer_evidence_and_trace_commit_together_or_not_at_all(started_turn, member_user):
    # given: a trace id already taken, so the trace insert violates its unique constraint
    taken = uuid.uuid4()
    services.complete_turn(conversation=started_turn, answer="第一次", evidence=evidence_record(),
                           trace=trace_record(taken), user=member_user)
    # when: the second answer's trace cannot be written
    with pytest.raises(IntegrityError):
        services.complete_turn(conversation=started_turn, answer="第二次", evidence=evidence_record(),
                               trace=trace_record(taken), user=member_user)
    # then: no answer without its evidence and trace
    assert list(Message.objects.filter(role="assistant").values_list("content", flat=True)) == ["第一次"]
    assert ChatEvidence.objects.count() == QueryTrace.objects.count() == 1


def test_faq_hit_counts_move_only_when_the_answer_commits(started_turn, member_user, staff_user, run_tasks, milvus):
    faq = faq_services.save_faq(kb=started_turn.knowledge_base, question="年假有多少天？", answer="7 天",
                                      actor=staff_user)
    # when: the answer is rolled back by an outer transaction
    with pytest.raises(RuntimeError), transaction.atomic():
        services.complete_turn(conversation=started_turn, answer="7 天", evidence=evidence_record(),
                               trace=trace_record(), user=member_user, faq_ids=(faq.pk,))
        raise RuntimeError("the request failed after the answer was written")
    faq.refresh_from_db()
    assert faq.hit_count == 0
    # when: it commits
    services.complete_turn(conversation=started_turn, answer="7 天", evidence=evidence_record(),
                           trace=trace_record(), user=member_user, faq_ids=(faq.pk,))
    faq.refresh_from_db()
    assert faq.hit_count == 1


def test_concurrent_faq_hits_are_all_counted(db, staff_user, run_tasks, milvus):
    kb = make_kb()
    faq = faq_services.save_faq(kb=kb, question="婚假有几天？", answer="10 天", actor=staff_user)
    # when: eight answers by the same FAQ commit at once
    results = in_threads(8, lambda _: faq_services.record_faq_hits(faq_ids=[faq.pk]))
    # then
    assert results == [1] * 8
    assert FAQ.objects.get(pk=faq.pk).hit_count == 8


def test_the_same_client_chat_id_arriving_twice_at_once_makes_one_conversation(db, member_user):
    kb = make_kb()
    requester = Requester(member_user)
    # when: two first turns of one AI SDK chat race
    results = in_threads(2, lambda i: services.start_turn(
        kb=kb, requester=requester, question=f"问题 {i}", conversation=None, client_id="chat-abc"))
    # then
    assert not [r for r in results if isinstance(r, Exception)], results
    assert Conversation.objects.filter(client_id="chat-abc").count() == 1
    assert Message.objects.filter(conversation__client_id="chat-abc", role="user").count() == 2


def test_anonymous_turns_are_owned_by_their_session(db):
    kb = make_kb()
    conversation, message = services.start_turn(
        kb=kb, requester=Requester(AnonymousUser(), session_key="sess-1"), question="你好", conversation=None)
    assert (conversation.user_id, conversation.session_key) == (None, "sess-1")
    assert conversation.title == "你好" and message.role == "user"


def test_a_failed_turn_keeps_the_delivered_text_and_no_evidence(started_turn, member_user):
    trace = services.TraceRecord(trace_id=uuid.uuid4(), kb_version=1, question="年假有几天？",
                                 error_code="provider_unavailable", error_class="ProviderUnavailable")
    message = services.fail_turn(conversation=started_turn, delivered_text="年假为", trace=trace,
                                 user=member_user, cancelled=False)
    assert (message.status, message.content, message.error_code) == ("error", "年假为", "provider_unavailable")
    assert not ChatEvidence.objects.exists()
    assert QueryTrace.objects.get().status == "failed"
