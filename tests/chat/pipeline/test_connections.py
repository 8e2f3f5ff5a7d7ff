"""Database connections of answering on PostgreSQL: a process's pool bounds them, a turn gives its
connection back while the model streams (seconds with a remote model), and a request that finds
none free is a 503.

Real parallel turns on real threads against the real pool (psycopg_pool through Django's
backend); the connections PostgreSQL sees are counted from `pg_stat_activity`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import AnonymousUser
from django.db import connection

from chat.contracts import ChatQuery, HitType, Requester
from chat.models import ChatEvidence, QueryTrace
from chat.pipeline.events import Finished
from tests.chat.pipeline.conftest import service_for

ON_POSTGRES = django_settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not ON_POSTGRES, reason="the connection pool is PostgreSQL's (set DATABASE_URL)"),
]

QUESTION = "报销要在多久内提交？"


class SlowModel:
    """A remote model's shape: a few deltas, seconds in all; notes whether the turn's thread held
    a database connection while each delta was produced."""

    name = "slow-remote"
    generative = True

    def __init__(self, *, deltas: int = 3, delay: float = 0.4) -> None:
        self.deltas, self.delay = deltas, delay
        self.held: list[bool] = []
        self.rewrites_held: list[bool] = []
        self._lock = threading.Lock()

    def stream(self, messages, *, max_tokens=1024, temperature=0.2) -> Iterator[str]:
        for number in range(self.deltas):
            time.sleep(self.delay)
            with self._lock:
                self.held.append(connection.connection is not None)
            yield "报销需在 30 天内提交[来源 1](citation://1)。" if number == 0 else "。"

    def complete(self, messages, *, max_tokens=1024, temperature=0.2) -> str:
        """A follow-up rewrite: one short completion."""
        time.sleep(self.delay)
        with self._lock:
            self.rewrites_held.append(connection.connection is not None)
        return "报销审批需要多久？"


@pytest.fixture
def small_pool():
    """This process's pool resized for one test (the next connection opens the new pool)."""
    options = connection.settings_dict["OPTIONS"]
    before = options.get("pool")

    def resize(*, max_size: int, timeout: float) -> None:
        connection.close()
        connection.close_pool()
        options["pool"] = {"min_size": 0, "max_size": max_size, "timeout": timeout}

    yield resize
    connection.close()
    connection.close_pool()
    if before is None:
        options.pop("pool", None)
    else:
        options["pool"] = before


def backends() -> int:
    """Connections PostgreSQL holds open to the test database, besides this observer's own."""
    params = connection.get_connection_params()
    dsn = {k: params[k] for k in ("dbname", "user", "host", "port", "password") if params.get(k)}
    with psycopg.connect(**dsn, autocommit=True) as observer:
        return observer.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]


def answer(kb, model, *, question: str = QUESTION, conversation_id=None) -> Finished:
    events = service_for(model).run(
        query=ChatQuery(knowledge_base_id=kb.slug, question=question, conversation_id=conversation_id),
        requester=Requester(AnonymousUser(), session_key="pool"),
    )
    try:
        return next(e for e in events if isinstance(e, Finished))
    finally:
        events.close()
        connection.close()  # a pool thread ends its turn like `chat.streaming` does


def test_a_turn_holds_no_connection_while_the_model_streams(handbook_kb):
    # given
    model = SlowModel(deltas=3, delay=0.05)
    # when
    finished = answer(handbook_kb, model)
    # then: no delta was written with a connection held, and the evidence was stored afterwards
    assert model.held == [False, False, False]
    assert finished.result.hit_type == HitType.RAG
    assert ChatEvidence.objects.filter(message_id=finished.result.assistant_message_id).exists()


def test_a_follow_up_is_rewritten_by_the_model_without_a_connection_held(handbook_kb):
    # given: a first question, then a follow-up the chat model rewrites
    model = SlowModel(deltas=1, delay=0.05)
    first = answer(handbook_kb, model)
    # when
    follow_up = answer(handbook_kb, model, question="那审批呢？", conversation_id=first.result.conversation_id)
    # then: the rewrite ran, with no connection held while the model wrote it
    assert follow_up.result.retrieval["rewritten_query"] == "报销审批需要多久？"
    assert model.rewrites_held == [False]
    assert not any(model.held)


def test_more_streaming_turns_than_pooled_connections_all_finish(handbook_kb, small_pool):
    # given: a pool of 2 that lets a request wait 1 s, and 6 turns whose model takes 1.2 s each
    small_pool(max_size=2, timeout=1.0)
    model = SlowModel(deltas=3, delay=0.4)
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, backends())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    # when: all six stream at once
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(lambda _: answer(handbook_kb, model), range(6)))
    finally:
        done.set()
        watcher.join()
    # then: every turn answered and was stored, and PostgreSQL never saw more than the pool
    assert [r.result.hit_type for r in results] == [HitType.RAG] * 6
    assert QueryTrace.objects.filter(status="completed").count() == 6
    assert not any(model.held)
    assert 1 <= peak <= 2


def test_a_request_that_finds_no_free_connection_is_server_busy(handbook_kb, small_pool, client):
    # given: a pool of one, taken by someone else
    small_pool(max_size=1, timeout=0.3)
    connection.ensure_connection()
    connection.close()  # open the pool, then give the connection back to it
    taken = connection.pool.getconn()
    try:
        # when
        response = client.post("/api/chat", {"knowledge_base_id": handbook_kb.slug, "question": QUESTION},
                               content_type="application/json")
    finally:
        connection.pool.putconn(taken)
    # then: 503 server_busy with Retry-After, not a 500
    assert response.status_code == 503
    assert response.json()["code"] == "server_busy"
    assert response["Retry-After"] == str(django_settings.RAG_BUSY_RETRY_AFTER_SECONDS)
