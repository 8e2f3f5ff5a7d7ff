"""The PostgreSQL connection of a request terminated (`pg_terminate_backend` from a second
connection) during retrieval and during the commit of a chat answer with its evidence.

Each ends in a coded error (`facts_unavailable`, `storage_unavailable`), the answer's
transaction rolls back whole (no message or evidence row of it), the failure is traced, and
the next request is served on a new connection.
"""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connection, connections

from chat.models import ChatEvidence, Message, MessageStatus, QueryTrace, TraceStatus
from tests.chat.conftest import RAG_QUESTION
from tests.fakes.provider_server import Held, Reply
from tests.live import eventually

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="pg_terminate_backend is PostgreSQL's"),
]

REWRITE = {"choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": '{"rewrite": "星河X3 路由器的保修期有多长？"}'}}]}


@pytest.fixture
def admin_connection():
    """A connection of its own, outside Django, to kill the others from."""
    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"],
        password=db["PASSWORD"] or None, dbname=db["NAME"], autocommit=True,
    ) as conn:
        yield conn


def terminate_others(conn, *, where: str = "true") -> int:
    """Terminate the test database's other backends matching `where`; how many."""
    rows = conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = current_database() AND pid <> pg_backend_pid() AND ({where})"
    ).fetchall()
    connection.close()  # the test thread's own connection was among them: reconnect on next use
    return len(rows)


def in_thread(call):
    results = []

    def run():
        try:
            results.append(call())
        finally:
            connections.close_all()  # this thread's own, or the test database cannot be dropped

    thread = threading.Thread(target=run)
    thread.start()
    return thread, results


def test_connection_dropped_during_retrieval_is_a_coded_503_and_the_next_request_is_served(
    faults_kb, openai_provider, member_api, admin_connection
):
    # given: retrieval waits for a rewrite, held until the test lets it go, between reading the
    # READY facts and the chunks
    released = threading.Event()
    openai_provider.enqueue("openai.chat", Held(released, then=Reply(json_body=REWRITE)))
    body = {"knowledge_base_id": faults_kb.slug, "question": RAG_QUESTION, "enable_query_rewrite": True}
    thread, results = in_thread(lambda: member_api.post("/api/retrieval/explain", body, format="json"))

    # when: the request's connection is terminated meanwhile
    try:
        assert eventually(lambda: openai_provider.requests("openai.chat") or results), "no rewrite asked"
        assert not results, results[0].content
        assert terminate_others(admin_connection) >= 1
    finally:
        released.set()
    thread.join(timeout=60)

    # then
    assert not thread.is_alive()
    assert results[0].status_code == 503, results[0].content
    assert results[0].json()["code"] == "facts_unavailable"

    # then: the next request gets a new connection
    again = member_api.post("/api/retrieval/explain", {**body, "enable_query_rewrite": False}, format="json")
    assert again.status_code == 200 and again.json()["results"]


def test_connection_dropped_during_the_evidence_commit_rolls_the_answer_back_whole(
    faults_kb, member_api, admin_connection
):
    # given: the trace table is locked, so the answer's transaction waits inside its commit
    # (message and evidence written, trace insert blocked)
    locker = psycopg.connect(admin_connection.info.dsn, password=connection.settings_dict["PASSWORD"] or None)
    locker.execute(f"LOCK TABLE {QueryTrace._meta.db_table} IN EXCLUSIVE MODE")
    body = {"knowledge_base_id": faults_kb.slug, "question": RAG_QUESTION}
    thread, results = in_thread(lambda: member_api.post("/api/chat", body, format="json"))
    try:
        blocked = eventually(lambda: admin_connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query ILIKE '%%querytrace%%'"
        ).fetchall())
        assert blocked, "the answer's commit never reached the trace insert"

        # when: that connection is terminated
        terminate_others(admin_connection, where=f"pid = {blocked[0][0]}")
    finally:
        locker.rollback()
        locker.close()
    thread.join(timeout=60)

    # then: a coded error, no row of the answer, the failure traced on a new connection
    assert not thread.is_alive()
    assert results[0].status_code == 503, results[0].content
    assert results[0].json()["code"] == "storage_unavailable"
    assert not ChatEvidence.objects.exists()
    assert not Message.objects.filter(role="assistant", status=MessageStatus.COMPLETE).exists()
    trace = QueryTrace.objects.get()
    assert (trace.status, trace.error_code) == (TraceStatus.FAILED, "storage_unavailable")

    # when / then: the next turn is answered and stored
    again = member_api.post("/api/chat", body, format="json")
    assert again.status_code == 200, again.content
    assert ChatEvidence.objects.count() == 1
