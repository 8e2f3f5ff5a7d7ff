"""The stock AI SDK client reads `/api/chat/stream`: `DefaultChatTransport` + `readUIMessageStream`
from the `ai` package (tests/js), run by node against daphne.

The package validates every chunk against its own schema (unknown keys are errors), so a stream
it accepts without errors is one a real `useChat` front end accepts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from chat.models import Conversation, Message, QueryTrace
from tests.chat.conftest import FAQ_ANSWER, FAQ_QUESTION, RAG_ANSWER_FACT, RAG_QUESTION, live_chat_server

pytestmark = pytest.mark.django_db(transaction=True)

JS_DIR = Path(__file__).resolve().parent.parent / "js"
SCRIPT = JS_DIR / "ai_sdk_chat.mjs"


def _installed_version() -> str | None:
    package = JS_DIR / "node_modules" / "ai" / "package.json"
    return json.loads(package.read_text())["version"] if package.exists() else None


@pytest.fixture(scope="session")
def ai_sdk() -> str:
    """The node binary, with tests/js's locked dependencies installed (`npm ci` when needed)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        if os.environ.get("CI_REQUIRE_BROWSER"):
            raise RuntimeError("node and npm are required (apt-get install nodejs npm)")
        pytest.skip("node/npm are not installed")
    locked = json.loads((JS_DIR / "package-lock.json").read_text())["packages"]["node_modules/ai"]["version"]
    if _installed_version() != locked:
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, check=True, timeout=300,
                       stdout=subprocess.DEVNULL)
    assert _installed_version() == locked
    return node


def run_client(node: str, base_url: str, *, kb_slug: str, chat_id: str, questions: list[str],
               headers: dict[str, str] | None = None) -> list[dict]:
    config = {"api": f"{base_url}/api/chat/stream", "knowledge_base_id": kb_slug, "chat_id": chat_id,
              "headers": headers or {}, "questions": questions}
    done = subprocess.run([node, str(SCRIPT), json.dumps(config)], cwd=JS_DIR, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)
    assert output["errors"] == [], "the AI SDK rejected part of the stream"
    return output["messages"]


def parts_of(message: dict, kind: str) -> list[dict]:
    return [p for p in message["parts"] if p["type"] == kind]


def test_ai_sdk_client_reads_the_answer_text_and_data_parts(ai_sdk, chat_kb):
    # given: an anonymous reader of a public knowledge base
    with live_chat_server() as base_url:
        # when
        (message,) = run_client(ai_sdk, base_url, kb_slug=chat_kb.slug, chat_id="chat-anon", questions=[RAG_QUESTION])

    # then
    assert message["role"] == "assistant"
    (text,) = parts_of(message, "text")
    assert RAG_ANSWER_FACT in text["text"] and "[来源 1](citation://1)" in text["text"]
    assert text.get("state", "done") == "done"
    (retrieval,) = parts_of(message, "data-retrieval")
    (answer,) = parts_of(message, "data-answer")
    assert retrieval["data"]["citations"] and retrieval["data"]["retrieval_results"]
    assert answer["data"]["hit_type"] == "rag"
    assert message["id"] == f"msg-{answer['data']['trace_id']}"
    assert parts_of(message, "data-status") == [], "status parts are transient"
    stored = Message.objects.get(pk=answer["data"]["message_id"])
    assert stored.content == text["text"]
    assert stored.evidence.citations == answer["data"]["citations"]


def test_ai_sdk_chat_id_keeps_one_conversation_across_turns(ai_sdk, chat_kb, member_user):
    # given: an integration authenticated with a token (node keeps no cookies)
    token = Token.objects.create(user=member_user)
    with live_chat_server() as base_url:
        # when: the same chat asks a question, a follow-up, then a FAQ
        first, second, third = run_client(
            ai_sdk, base_url, kb_slug=chat_kb.slug, chat_id="chat-42",
            questions=[RAG_QUESTION, "那 X5 呢？", FAQ_QUESTION], headers={"Authorization": f"Token {token.key}"},
        )

    # then: one conversation, with the history used for the follow-up
    answers = [parts_of(m, "data-answer")[0]["data"] for m in (first, second, third)]
    assert len({a["conversation_id"] for a in answers}) == 1
    conversation = Conversation.objects.get(pk=answers[0]["conversation_id"])
    assert (conversation.user, conversation.client_id) == (member_user, "chat-42")
    assert conversation.messages.count() == 6
    assert "36 个月" in parts_of(second, "text")[0]["text"]
    follow_up = QueryTrace.objects.get(trace_id=answers[1]["trace_id"])
    assert follow_up.full_details["preparation"]["history_turns"] == 1
    assert follow_up.rewritten_query != "那 X5 呢？"
    assert (answers[2]["hit_type"], parts_of(third, "text")[0]["text"]) == ("faq_exact", FAQ_ANSWER)
