"""TurnRunner: the pipeline in a worker thread, events handed to the event loop."""

from __future__ import annotations

import asyncio

import pytest
from django.contrib.auth.models import AnonymousUser
from django.utils import translation

from chat.contracts import ChatQuery, Requester
from chat.pipeline.events import Finished, Status
from chat.streaming import TurnRunner
from tests.chat.conftest import GREETING, OFF_TOPIC_QUESTION

pytestmark = pytest.mark.django_db(transaction=True)


def run_turn(kb, question: str):
    async def collect():
        runner = TurnRunner(
            query=ChatQuery(knowledge_base_id=kb.slug, question=question),
            requester=Requester(AnonymousUser(), session_key="s"),
        ).start()
        events = []
        while True:
            outcome = await runner.next()
            if outcome.kind == "done":
                return events
            assert outcome.kind == "event", outcome.value
            events.append(outcome.value)

    return asyncio.run(collect())


def test_the_worker_thread_answers_in_the_requests_language(chat_kb):
    # when: an English request, run on a pool thread that has no language of its own
    with translation.override("en"):
        events = run_turn(chat_kb, OFF_TOPIC_QUESTION)
    # then: statuses and the fixed answer are English
    statuses = [e.message for e in events if isinstance(e, Status)]
    assert statuses[0] == "Routing the question..."
    answer = events[-1].result.answer
    assert answer.startswith("The current knowledge base cannot settle this question")


def test_the_worker_thread_answers_in_chinese_by_default(chat_kb):
    events = run_turn(chat_kb, GREETING)
    assert isinstance(events[-1], Finished)
    assert [e.message for e in events if isinstance(e, Status)] == ["正在进行查询路由..."]
