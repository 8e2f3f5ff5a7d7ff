"""JSON no request of ours looks like, sent from outside to a real daphne: nested 100,000 levels
deep, or holding an integer of 401 digits. Each was a 500 (RecursionError, OverflowError), a
reset WebSocket or "Error executing tool" on MCP; each must be a coded 400 (an `error` event on
the socket, a tool error with the API's body on MCP) and leave the server serving."""

from __future__ import annotations

import json

import httpx
import pytest
from rest_framework.authtoken.models import Token
from websockets.sync.client import connect

from chat.models import Message
from knowledge.models import Document
from tests.chat.conftest import RAG_QUESTION, chat_kb, live_chat_server, ws_url
from tests.integrations.mcp_client import tool_call

__all__ = ["chat_kb"]  # the chat tests' published base, as a fixture here

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

DEPTH = 100_000
HUGE = 10**400  # json.dumps writes it as 1 followed by 400 zeros


def deep_filters(body: dict) -> bytes:
    """`body` with `"filters":` followed by DEPTH `[` and as many `]`, as the probe sent it."""
    text = json.dumps(body, ensure_ascii=False)
    return (text[:-1] + ', "filters": ' + "[" * DEPTH + "]" * DEPTH + "}").encode()


@pytest.fixture
def server(chat_kb):
    with live_chat_server() as base_url:
        yield base_url


@pytest.fixture
def staff_token(staff_user) -> str:
    return Token.objects.create(user=staff_user).key


def assert_invalid_json(response: httpx.Response) -> None:
    assert response.status_code == 400, response.text[:500]
    body = response.json()
    code = body.get("code") or body.get("error", {}).get("code")  # ragsite's shape, or OpenAI's
    assert code == "invalid_json", body


@pytest.mark.parametrize("path, body", [
    ("/api/chat", {"question": RAG_QUESTION}),
    ("/api/chat/stream", {"question": RAG_QUESTION}),
    ("/api/retrieval/search", {"question": RAG_QUESTION}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": RAG_QUESTION}]}),
])
def test_json_nested_deeper_than_any_request_is_invalid_json_anonymously(server, chat_kb, path, body):
    # given: the knowledge base named as each endpoint names it
    named = {**body, "model": chat_kb.slug} if path.startswith("/v1") else {**body, "knowledge_base_id": chat_kb.slug}
    # when
    response = httpx.post(server + path, content=deep_filters(named),
                          headers={"Content-Type": "application/json"}, timeout=60)
    # then: refused, and the next request is served
    assert_invalid_json(response)
    assert httpx.post(server + "/api/retrieval/search", json={"knowledge_base_id": chat_kb.slug,
                                                              "question": RAG_QUESTION}, timeout=60).status_code == 200


def test_deep_json_in_feedback_and_a_document_patch_is_invalid_json(server, chat_kb, staff_token):
    # given: an answer of the staff user's and a document of the base
    auth = {"Authorization": f"Token {staff_token}", "Content-Type": "application/json"}
    answered = httpx.post(server + "/api/chat", json={"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION},
                          headers=auth, timeout=60)
    assert answered.status_code == 200, answered.text
    message = Message.objects.get(role="assistant")
    document = Document.objects.filter(knowledge_base=chat_kb).first()
    deep = ("[" * DEPTH + "]" * DEPTH).encode()
    # when
    feedback = httpx.put(f"{server}/api/chat/messages/{message.pk}/feedback",
                         content=b'{"verdict": "up", "reason": ' + deep + b"}", headers=auth, timeout=60)
    patch = httpx.patch(f"{server}/api/knowledge-bases/{chat_kb.slug}/documents/{document.pk}/",
                        content=b'{"attributes": ' + deep + b"}", headers=auth, timeout=60)
    # then
    assert_invalid_json(feedback)
    assert_invalid_json(patch)


def test_deep_json_on_the_websocket_is_an_error_event_and_the_socket_stays(server, chat_kb):
    with connect(ws_url(server), origin=server, proxy=None, open_timeout=30, max_size=None) as socket:
        # when
        socket.send(deep_filters({"type": "question", "knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION})
                    .decode())
        event = json.loads(socket.recv(timeout=30))
        # then: an error event, and the same socket answers the next question
        assert (event["type"], event["code"]) == ("error", "invalid_json")
        socket.send(json.dumps({"type": "question", "knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION}))
        kinds = []
        while not kinds or kinds[-1] not in ("end", "error"):
            kinds.append(json.loads(socket.recv(timeout=60))["type"])
        assert kinds[-1] == "end"


def test_a_binary_websocket_frame_is_an_error_event_not_a_reset(server, chat_kb):
    with connect(ws_url(server), origin=server, proxy=None, open_timeout=30) as socket:
        socket.send(b"\x00\x01")
        event = json.loads(socket.recv(timeout=30))
        assert (event["type"], event["code"]) == ("error", "invalid_json")


HUGE_FILTER = [{"field": "年份", "op": "eq", "value": HUGE}]


@pytest.mark.parametrize("path", ["/api/retrieval/search", "/api/chat", "/api/chat/stream"])
def test_an_integer_of_401_digits_in_a_filter_is_invalid_filter(server, chat_kb, path):
    # when
    response = httpx.post(server + path, json={"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION,
                                               "filters": HUGE_FILTER}, timeout=60)
    # then
    assert response.status_code == 400, response.text[:500]
    assert response.json()["code"] == "invalid_filter"


def test_an_integer_of_401_digits_in_a_range_filter_is_invalid_filter(server, chat_kb):
    response = httpx.post(server + "/api/retrieval/search", json={
        "knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION,
        "filters": [{"field": "年份", "op": "range", "gte": HUGE}]}, timeout=60)
    assert response.status_code == 400 and response.json()["code"] == "invalid_filter", response.text[:500]


def test_an_integer_of_401_digits_on_the_websocket_is_an_invalid_filter_event(server, chat_kb):
    with connect(ws_url(server), origin=server, proxy=None, open_timeout=30) as socket:
        socket.send(json.dumps({"type": "question", "knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION,
                                "filters": HUGE_FILTER}))
        event = json.loads(socket.recv(timeout=30))
        assert (event["type"], event["code"]) == ("error", "invalid_filter")


def test_an_integer_of_401_digits_through_mcp_is_a_tool_error_with_the_api_body(server, chat_kb):
    # when
    result = tool_call(server, "search_knowledge_base",
                       {"kb": chat_kb.slug, "query": RAG_QUESTION, "filters": HUGE_FILTER})
    # then
    assert result.is_error
    assert "invalid_filter" in result.content[0].text, result.content[0].text


def test_an_integer_of_401_digits_in_document_attributes_is_invalid_attributes(server, chat_kb, staff_token):
    document = Document.objects.filter(knowledge_base=chat_kb).first()
    response = httpx.patch(f"{server}/api/knowledge-bases/{chat_kb.slug}/documents/{document.pk}/",
                           json={"attributes": {"编号": HUGE}}, headers={"Authorization": f"Token {staff_token}"},
                           timeout=60)
    assert response.status_code == 400, response.text[:500]
    assert response.json()["code"] == "invalid_attributes"


def test_get_on_the_mcp_endpoint_is_405_not_an_endless_stream(server):
    # when: what a client opening the server-to-client stream sends
    response = httpx.get(server + "/mcp/", headers={"Accept": "text/event-stream"}, timeout=10)
    # then: stateless JSON mode has no such stream
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"


def test_deep_json_to_mcp_is_a_json_rpc_parse_error(server):
    # given: a tool call whose arguments nest DEPTH levels deep
    body = ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search_knowledge_base", '
            '"arguments": {"kb": "x", "query": "q", "filters": ' + "[" * DEPTH + "]" * DEPTH + "}}}")
    # when
    response = httpx.post(server + "/mcp/", content=body.encode(), timeout=60,
                          headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
    # then: the protocol's own refusal (the SDK parses the body), not a 500
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700  # JSON-RPC "Parse error"
