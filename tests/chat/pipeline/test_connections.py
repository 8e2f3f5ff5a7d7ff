"""Database connections of answering on PostgreSQL: a turn gives its connection back while the
model streams (seconds with a remote model) and stores its answer on a fresh one."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import AnonymousUser
from django.db import connection

from chat.contracts import ChatQuery, HitType, Requester
from chat.models import ChatEvidence
from chat.pipeline.events import Finished
from chat.pipeline.rag import RAGService

ON_POSTGRES = django_settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not ON_POSTGRES, reason="SQLite keeps its in-memory test database open (set DATABASE_URL)"),
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
        self._lock = threading.Lock()

    def stream(self, messages, *, max_tokens=1024, temperature=0.2) -> Iterator[str]:
        for number in range(self.deltas):
            time.sleep(self.delay)
            with self._lock:
                self.held.append(connection.connection is not None)
            yield f"报销需在 30 天内提交[来源 1](citation://1)。" if number == 0 else "。"

    def complete(self, messages, *, max_tokens=1024, temperature=0.2) -> str:
        return "".join(self.stream(messages))


def answer(kb, model) -> Finished:
    events = RAGService(chat_model=lambda: model).run(
        query=ChatQuery(knowledge_base_id=kb.slug, question=QUESTION),
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
