"""👍 / 👎 on answers: through the API (the reader's own answers only, one verdict per answer,
changed or withdrawn), in a conversation's history, over the WebSocket against daphne, and from
parallel requests on PostgreSQL."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient
from websockets.sync.client import connect

from chat.contracts import Requester
from chat.feedback import services as feedback_services
from chat.models import AnswerFeedback, Message, MessageRole, MessageStatus
from tests.chat.conftest import RAG_QUESTION, live_chat_server, session_cookie_for, ws_url
from tests.conftest import api_client_for

pytestmark = pytest.mark.django_db(transaction=True)


def feedback_url(message_id) -> str:
    return f"/api/chat/messages/{message_id}/feedback"


@pytest.fixture
def answered(internal_chat_kb, member_api) -> dict:
    """The member asked the internal knowledge base one question: the /api/chat answer."""
    response = member_api.post("/api/chat", {"knowledge_base_id": internal_chat_kb.slug, "question": RAG_QUESTION},
                               format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_a_reader_rates_their_answer_then_changes_their_mind(answered, member_api):
    # when: 👎 with a reason, then 👍
    down = member_api.put(feedback_url(answered["message_id"]), {"verdict": "down", "reason": " 数字不对 "}, format="json")
    up = member_api.put(feedback_url(answered["message_id"]), {"verdict": "up"}, format="json")

    # then: one row, the latest verdict, no stale reason; the version the answer came from
    assert down.status_code == 200 and down.json()["verdict"] == "down" and down.json()["reason"] == "数字不对"
    assert up.status_code == 200 and up.json() | {"updated_at": None} == {
        "message_id": answered["message_id"], "verdict": "up", "reason": "", "updated_at": None}
    row = AnswerFeedback.objects.get()
    assert (row.verdict, row.reason, row.kb_version, row.user.username) == ("up", "", answered["kb_version"], "member")
    assert member_api.get(feedback_url(answered["message_id"])).json()["verdict"] == "up"


def test_the_openai_completion_id_names_the_same_answer(answered, member_api):
    # when
    response = member_api.put(feedback_url(f"chatcmpl-{answered['message_id']}"), {"verdict": "down"}, format="json")
    # then
    assert response.status_code == 200 and AnswerFeedback.objects.get().message_id == answered["message_id"]


def test_a_streamed_openai_completion_id_names_the_answer_by_its_trace(answered, member_api):
    # when: "chatcmpl-<trace id>", what a streamed OpenAI-compatible answer is known by
    response = member_api.put(feedback_url(f"chatcmpl-{answered['trace_id']}"), {"verdict": "up"}, format="json")
    # then
    assert response.status_code == 200 and AnswerFeedback.objects.get().message_id == answered["message_id"]


def test_another_readers_answer_answers_like_a_missing_one(answered, staff_api):
    # given: the newest id, plus one that was never used
    missing_id = Message.objects.order_by("-pk").first().pk + 1000

    # when: a superuser, who may read the knowledge base, rates the member's answer
    theirs = staff_api.put(feedback_url(answered["message_id"]), {"verdict": "down"}, format="json")
    missing = staff_api.put(feedback_url(missing_id), {"verdict": "down"}, format="json")

    # then: the same 404, the id aside; nothing stored
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["code"] == missing.json()["code"] == "message_not_found"
    assert theirs.json()["detail"].replace(str(answered["message_id"]), "N") == missing.json()["detail"].replace(str(missing_id), "N")
    assert not AnswerFeedback.objects.exists()


def test_the_question_is_not_an_answer(answered, member_api):
    # when: the user message of the same turn
    response = member_api.put(feedback_url(answered["user_message_id"]), {"verdict": "up"}, format="json")
    # then
    assert response.status_code == 404


@pytest.mark.parametrize("body, field", [
    ({"verdict": "meh"}, "verdict"),
    ({"verdict": "down", "reason": "长" * 1001}, "reason"),
    ({"verdict": "down", "reason": "a\x00b"}, "reason"),
    ({}, "verdict"),
])
def test_bad_feedback_is_refused_and_keeps_the_verdict_given(answered, member_api, body, field):
    # given
    member_api.put(feedback_url(answered["message_id"]), {"verdict": "up"}, format="json")
    # when
    response = member_api.put(feedback_url(answered["message_id"]), body, format="json")
    # then
    assert response.status_code == 400 and field in response.json()["errors"]
    assert AnswerFeedback.objects.get().verdict == "up"


@pytest.mark.parametrize("message_id", ["0", "abc", "chatcmpl-", "1" * 30, "-1", "chatcmpl-00000000-0000-0000-0000-000000000000"])
def test_an_id_that_names_no_answer_is_not_found(answered, member_api, message_id):
    # when
    response = member_api.put(feedback_url(message_id), {"verdict": "up"}, format="json")
    # then
    assert response.status_code == 404 and response.json()["code"] == "message_not_found"


def test_a_withdrawn_verdict_is_gone(answered, member_api):
    # given
    member_api.put(feedback_url(answered["message_id"]), {"verdict": "down"}, format="json")
    # when
    response = member_api.delete(feedback_url(answered["message_id"]))
    # then
    assert response.status_code == 204 and not AnswerFeedback.objects.exists()
    assert member_api.get(feedback_url(answered["message_id"])).json()["code"] == "feedback_not_found"


def test_the_history_shows_the_verdict_given(answered, member_api):
    # given
    member_api.put(feedback_url(answered["message_id"]), {"verdict": "down", "reason": "不完整"}, format="json")
    # when
    messages = member_api.get(f"/api/chat/conversations/{answered['conversation_id']}").json()["messages"]
    # then
    assert [m["feedback"] and (m["feedback"]["verdict"], m["feedback"]["reason"]) for m in messages] == [None, ("down", "不完整")]


def test_an_anonymous_reader_rates_answers_of_their_own_session(chat_kb):
    # given: an anonymous reader asked the public knowledge base (their session owns the answer)
    reader = APIClient()
    answer = reader.post("/api/chat", {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION}, format="json").json()

    # when: they rate it, and another anonymous browser tries to
    mine = reader.put(feedback_url(answer["message_id"]), {"verdict": "down"}, format="json")
    stranger = APIClient().put(feedback_url(answer["message_id"]), {"verdict": "up"}, format="json")

    # then
    assert mine.status_code == 200 and stranger.status_code == 404
    row = AnswerFeedback.objects.get()
    assert row.user is None and row.session_key and row.verdict == "down"


def test_parallel_first_verdicts_on_one_answer_leave_one_row(answered, member_user):
    # given: PostgreSQL, where the parallel inserts really race (SQLite would serialise them)
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def rate(verdict: str) -> None:
        from django.db import connections

        try:
            barrier.wait()
            feedback_services.give_feedback(requester=Requester(user=member_user), message_id=answered["message_id"],
                                            verdict=verdict)
        except BaseException as exc:  # noqa: BLE001 — reported by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    # when: four first verdicts at once, each on its own connection
    threads = [threading.Thread(target=rate, args=(v,)) for v in ("up", "down", "up", "down")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # then: none failed, and the answer has one verdict
    assert errors == [] and AnswerFeedback.objects.count() == 1


def test_feedback_over_the_websocket(internal_chat_kb, member_user):
    # given: the member's signed-in socket
    cookies = session_cookie_for(member_user)
    with live_chat_server() as base_url:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
        with connect(ws_url(base_url), origin=base_url, additional_headers=headers, proxy=None, open_timeout=30) as socket:
            socket.send(json.dumps({"type": "question", "knowledge_base_id": internal_chat_kb.slug, "question": RAG_QUESTION}))
            while (end := json.loads(socket.recv(timeout=60)))["type"] not in ("end", "error"):
                pass
            assert end["type"] == "end", end

            # when: a verdict, a bad one, then a withdrawal
            socket.send(json.dumps({"type": "feedback", "message_id": end["message_id"], "verdict": "down", "reason": "太长"}))
            given = json.loads(socket.recv(timeout=30))
            socket.send(json.dumps({"type": "feedback", "message_id": end["message_id"], "verdict": "sideways"}))
            refused = json.loads(socket.recv(timeout=30))
            socket.send(json.dumps({"type": "feedback", "message_id": end["message_id"] + 1000, "verdict": "up"}))
            missing = json.loads(socket.recv(timeout=30))
            stored = AnswerFeedback.objects.get()
            socket.send(json.dumps({"type": "feedback", "message_id": end["message_id"], "verdict": None}))
            withdrawn = json.loads(socket.recv(timeout=30))

    # then
    assert given["type"] == "feedback" and (given["message_id"], given["verdict"], given["reason"]) == (end["message_id"], "down", "太长")
    assert (stored.verdict, stored.reason, stored.user_id) == ("down", "太长", member_user.pk)
    assert (refused["type"], refused["code"]) == ("error", "invalid_request")
    assert (missing["type"], missing["code"]) == ("error", "message_not_found")
    assert withdrawn == {"type": "feedback", "message_id": end["message_id"], "verdict": None, "reason": ""}
    assert not AnswerFeedback.objects.exists()


def test_an_unfinished_answer_takes_no_verdict(answered, member_api):
    # given: the answer was cancelled (its text is partial)
    Message.objects.filter(pk=answered["message_id"]).update(status=MessageStatus.CANCELLED)
    # when
    response = member_api.put(feedback_url(answered["message_id"]), {"verdict": "down"}, format="json")
    # then
    assert response.status_code == 404 and Message.objects.get(pk=answered["message_id"]).role == MessageRole.ASSISTANT


def test_a_signed_out_client_cannot_rate_a_users_answer(answered):
    # when
    response = api_client_for(None).put(feedback_url(answered["message_id"]), {"verdict": "up"}, format="json")
    # then
    assert response.status_code == 404
