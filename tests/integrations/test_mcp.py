"""The MCP server at /mcp/ over HTTP against a real daphne, with the official MCP client
(`streamable_http_client` + `ClientSession`): its tools, who may read what, the turn it stores,
and its refusals."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import anyio
import httpx
import pytest
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

from rest_framework.authtoken.models import Token

from chat.models import ChatEvidence, Message, MessageRole, QueryTrace
from knowledge.models import KnowledgeBase, Visibility
from ragsite.limits import acquire_stream_slot
from ragsite.throttles import SCOPES
from tests.chat.conftest import RAG_ANSWER_FACT, RAG_QUESTION, live_chat_server, publish_kb
from tests.integrations.mcp_client import mcp_call, mcp_url, tool_call

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
CJK = re.compile(r"[\u4e00-\u9fff]")
ENGLISH = re.compile(r"\b[A-Za-z]{3,}\b.*\b[A-Za-z]{3,}\b")


# --- fixtures: the world each test starts from ----------------------------------------------
# `mcp_kb` (public, slug `handbook`) and `private_mcp_kb` (restricted to the `engineers` group,
# slug `secrets`): published through real ingestion (tests/chat's `publish_kb`); the tokens are
# the API's (DRF) of `member_user` and `engineer_user`.


@pytest.fixture
def mcp_kb(milvus, run_tasks, media_root, staff_user) -> KnowledgeBase:
    return publish_kb(actor=staff_user, visibility=Visibility.PUBLIC, slug="handbook")


@pytest.fixture
def private_mcp_kb(milvus, run_tasks, media_root, staff_user, engineers_group) -> KnowledgeBase:
    return publish_kb(actor=staff_user, visibility=Visibility.RESTRICTED, groups=[engineers_group], slug="secrets",
                      faqs=[])


@pytest.fixture
def member_token(member_user) -> str:
    return Token.objects.create(user=member_user).key


@pytest.fixture
def engineer_token(engineer_user) -> str:
    return Token.objects.create(user=engineer_user).key


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def leaves(exc: BaseException):
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc


# --- tools ----------------------------------------------------------------------------------


def test_the_tools_and_their_arguments_are_described_in_chinese_and_english(mcp_kb):
    # given
    with live_chat_server() as base_url:
        # when
        listing = mcp_call(mcp_url(base_url), lambda session: session.list_tools())
    # then
    tools = {tool.name: tool for tool in listing.tools}
    assert set(tools) == {"list_knowledge_bases", "search_knowledge_base", "ask_knowledge_base"}
    for tool in tools.values():
        texts = [tool.description] + [p["description"] for p in tool.input_schema.get("properties", {}).values()]
        for text in texts:
            assert CJK.search(text) and ENGLISH.search(text), (tool.name, text)
        assert tool.output_schema is not None  # structured output
    assert tools["search_knowledge_base"].input_schema["properties"]["top_k"]["maximum"] == 20
    assert tools["ask_knowledge_base"].input_schema["required"] == ["kb", "question"]


def test_a_client_of_the_newest_protocol_is_served_without_a_handshake(mcp_kb):
    # given: the SDK's own Client, which asks `server/discover` first (protocol 2026-07-28: one
    # self-contained POST per request) and only falls back to the initialize handshake
    with live_chat_server() as base_url:
        # when
        async def run():
            async with Client(mcp_url(base_url)) as client:
                return client.session.discover_result, await client.call_tool("list_knowledge_bases", {})

        discovered, result = anyio.run(run)
    # then
    assert discovered is not None
    assert not result.is_error and [kb["slug"] for kb in result.structured_content["knowledge_bases"]] == ["handbook"]


# --- list_knowledge_bases -------------------------------------------------------------------


def test_each_caller_lists_the_knowledge_bases_it_may_read(mcp_kb, private_mcp_kb, member_token, engineer_token):
    # given: a public knowledge base and one restricted to the engineers
    with live_chat_server() as base_url:
        # when
        def slugs(headers):
            result = mcp_call(mcp_url(base_url), lambda s: s.call_tool("list_knowledge_bases", {}), headers=headers)
            assert not result.is_error
            return [kb["slug"] for kb in result.structured_content["knowledge_bases"]], result

        anonymous, _ = slugs(None)
        member, member_result = slugs(bearer(member_token))
        engineer, _ = slugs({"Authorization": f"Token {engineer_token}"})  # the API's own scheme
    # then
    assert anonymous == ["handbook"]
    assert member == ["handbook"]
    assert sorted(engineer) == ["handbook", "secrets"]
    listed = member_result.structured_content["knowledge_bases"][0]
    assert listed == {"slug": "handbook", "name": mcp_kb.name, "description": mcp_kb.description,
                      "active_version": mcp_kb.active_version.number}
    assert "handbook" in member_result.content[0].text


# --- search_knowledge_base ------------------------------------------------------------------


def test_a_search_answers_ranked_passages_with_their_citations_and_scores(mcp_kb, member_token):
    # given
    with live_chat_server() as base_url:
        # when
        result = tool_call(base_url, "search_knowledge_base", {"kb": "handbook", "query": RAG_QUESTION, "top_k": 3},
                           headers=bearer(member_token))
    # then
    assert not result.is_error
    found = result.structured_content
    assert found["knowledge_base"] == "handbook" and found["query"] == RAG_QUESTION
    assert 1 <= len(found["results"]) <= 3
    top = found["results"][0]
    assert top["rank"] == 1
    assert top["document_title"] == "产品手册"
    assert RAG_ANSWER_FACT in top["excerpt"]
    assert top["heading_path"] and isinstance(top["locator"], dict)
    assert 0.0 < top["relevance"] <= 1.0 and top["score"] > 0
    scores = [hit["score"] for hit in found["results"]]
    assert scores == sorted(scores, reverse=True)
    assert "产品手册" in result.content[0].text and RAG_ANSWER_FACT in result.content[0].text


def test_a_search_reads_the_same_evidence_as_the_retrieval_api(mcp_kb, member_token, member_api):
    # given: the API's answer to the same question
    api = member_api.post("/api/retrieval/search", {"knowledge_base_id": "handbook", "question": RAG_QUESTION,
                                                    "top_k": 5}, format="json").json()
    with live_chat_server() as base_url:
        # when
        result = tool_call(base_url, "search_knowledge_base", {"kb": "handbook", "query": RAG_QUESTION},
                           headers=bearer(member_token))
    # then
    assert [hit["chunk_id"] for hit in result.structured_content["results"]] == [hit["chunk_id"] for hit in api]
    assert [hit["relevance"] for hit in result.structured_content["results"]] == [hit["relevance"] for hit in api]


def test_a_knowledge_base_the_caller_may_not_read_is_refused_like_a_missing_one(
    mcp_kb, private_mcp_kb, member_token, engineer_token
):
    # given: `secrets` is the engineers' only
    with live_chat_server() as base_url:
        # when
        def search(kb, headers):
            return tool_call(base_url, "search_knowledge_base", {"kb": kb, "query": RAG_QUESTION}, headers=headers)

        private = search("secrets", bearer(member_token))
        missing = search("no-such-kb", bearer(member_token))
        anonymous = search("secrets", None)
        asked = tool_call(base_url, "ask_knowledge_base", {"kb": "secrets", "question": RAG_QUESTION},
                          headers=bearer(member_token))
        engineer = search("secrets", bearer(engineer_token))
    # then
    for refused in (private, missing, anonymous, asked):
        assert refused.is_error
        assert refused.structured_content["code"] == "knowledge_base_not_found"
    assert private.content[0].text == missing.content[0].text.replace("no-such-kb", "secrets")
    assert private.content[0].text == anonymous.content[0].text == asked.content[0].text
    assert "secrets" in private.content[0].text and "不存在或无权访问" in private.content[0].text
    assert not engineer.is_error and engineer.structured_content["results"]


# --- ask_knowledge_base ---------------------------------------------------------------------


def test_a_question_is_answered_with_citations_and_stored_as_a_turn(mcp_kb, member_token, member_user):
    # given
    with live_chat_server() as base_url:
        # when
        result = tool_call(base_url, "ask_knowledge_base", {"kb": "handbook", "question": RAG_QUESTION},
                           headers=bearer(member_token))
    # then: a cited answer
    assert not result.is_error, result.content
    answer = result.structured_content
    assert RAG_ANSWER_FACT in answer["answer"]
    assert re.search(r"\[来源 \d+\]", answer["answer"]) and "citation://" not in answer["answer"]
    cited = [c for c in answer["citations"] if c["cited"]]
    assert cited and cited[0]["title"] == "产品手册" and RAG_ANSWER_FACT in cited[0]["excerpt"]
    assert answer["hit_type"] == "rag" and answer["knowledge_base"] == "handbook"
    assert answer["confidence"]["level"] in {"high", "medium", "low"}
    assert answer["kb_version"] == mcp_kb.active_version.number
    assert "[来源 1]" in result.content[0].text and answer["trace_id"] in result.content[0].text
    # and: stored like any turn, the caller's own
    message = Message.objects.get(pk=answer["message_id"])
    assert message.role == MessageRole.ASSISTANT
    assert re.sub(r"\(citation://\d+\)", "", message.content) == answer["answer"]
    assert str(message.trace_id) == answer["trace_id"]
    assert message.conversation.user == member_user and str(message.conversation.pk) == answer["conversation_id"]
    assert Message.objects.filter(conversation=message.conversation, role=MessageRole.USER, content=RAG_QUESTION).exists()
    evidence = ChatEvidence.objects.get(message=message)
    assert [c["number"] for c in evidence.citations] == [c["number"] for c in answer["citations"]]
    assert QueryTrace.objects.get(trace_id=answer["trace_id"]).assistant_message == message


def test_a_follow_up_continues_the_callers_own_conversation_only(mcp_kb, member_token, engineer_token):
    # given: the member's first question
    with live_chat_server() as base_url:
        def ask(question, token, conversation_id=None):
            arguments = {"kb": "handbook", "question": question}
            if conversation_id:
                arguments["conversation_id"] = conversation_id
            return tool_call(base_url, "ask_knowledge_base", arguments, headers=bearer(token))

        first = ask(RAG_QUESTION, member_token)
        conversation = first.structured_content["conversation_id"]
        # when
        follow_up = ask("那星河X5 呢？", member_token, conversation)
        someone_else = ask("那星河X5 呢？", engineer_token, conversation)
    # then
    assert not follow_up.is_error and follow_up.structured_content["conversation_id"] == conversation
    assert "36 个月" in follow_up.structured_content["answer"]
    assert someone_else.is_error and someone_else.structured_content["code"] == "conversation_not_found"


def test_an_anonymous_caller_may_ask_a_public_knowledge_base(mcp_kb):
    # given: no Authorization header
    with live_chat_server() as base_url:
        # when
        result = tool_call(base_url, "ask_knowledge_base", {"kb": "handbook", "question": RAG_QUESTION})
    # then
    assert not result.is_error, result.content
    assert RAG_ANSWER_FACT in result.structured_content["answer"]
    assert Message.objects.get(pk=result.structured_content["message_id"]).conversation.user is None


def test_questions_over_the_chat_rate_limit_are_refused(mcp_kb, member_token, settings):
    # given: one question a minute per user
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {**{scope: None for scope in SCOPES}, "chat_user": "1/min"},
    }
    with live_chat_server() as base_url:
        # when
        def ask():
            return tool_call(base_url, "ask_knowledge_base", {"kb": "handbook", "question": RAG_QUESTION},
                             headers=bearer(member_token))

        first, second = ask(), ask()
    # then
    assert not first.is_error
    assert second.is_error and second.structured_content["code"] == "throttled"
    assert second.structured_content["retry_after"] >= 1


def test_a_question_needs_a_free_concurrent_answer_slot(mcp_kb, member_user, member_token, redis_cache, settings):
    # given: one answer at a time per user, and the member's one slot taken (an answer streaming
    # on the site)
    settings.RAG_MAX_STREAMS_PER_USER = 1
    slot = acquire_stream_slot(SimpleNamespace(user=member_user, META={}))
    assert slot is not None
    with live_chat_server() as base_url:
        # when
        def ask():
            return tool_call(base_url, "ask_knowledge_base", {"kb": "handbook", "question": RAG_QUESTION},
                             headers=bearer(member_token))

        while_held = ask()
        slot.release()
        after = ask()
    # then
    assert while_held.is_error and while_held.structured_content["code"] == "too_many_streams"
    assert not after.is_error


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("authorization", ["Bearer not-a-token", "Token not-a-token", "Bearer", "Token a b"])
def test_a_bad_token_is_refused_with_http_401(db, authorization):
    # given
    responses = []
    with live_chat_server() as base_url:
        # when
        with pytest.raises(BaseException) as raised:
            mcp_call(mcp_url(base_url), lambda session: session.list_tools(),
                     headers={"Authorization": authorization}, responses=responses)
    # then: the client saw the 401 and failed on it
    assert any(isinstance(leaf, MCPError) for leaf in leaves(raised.value))
    assert [response.status_code for response in responses] == [401]
    assert responses[0].headers["WWW-Authenticate"].startswith("Bearer")
    assert responses[0].json()["code"] == "authentication_failed"


def test_an_inactive_users_token_is_refused(member_user, member_token):
    # given
    member_user.is_active = False
    member_user.save()
    responses = []
    with live_chat_server() as base_url:
        # when
        with pytest.raises(BaseException):
            mcp_call(mcp_url(base_url), lambda session: session.list_tools(), headers=bearer(member_token),
                     responses=responses)
    # then
    assert [response.status_code for response in responses] == [401]


def test_a_host_django_would_refuse_is_refused(mcp_kb):
    # given: a Host header outside ALLOWED_HOSTS (what a DNS-rebinding page would send)
    with live_chat_server() as base_url:
        # when
        response = httpx.post(mcp_url(base_url), headers={"Host": "evil.example", "Accept": "application/json"},
                              json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    # then
    assert response.status_code == 400 and response.json()["code"] == "bad_host"


@pytest.mark.django_db(transaction=False)
def test_the_endpoint_is_left_to_django_when_switched_off():
    # given: RAG_MCP_ENABLED=false in a fresh process
    probe = ("import ragsite.asgi as a; "
             "print(a.application.application_mapping['http'] is a.django_asgi_app)")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "ragsite.settings.test", "RAG_MCP_ENABLED": "false"}
    # when
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    # then: /mcp/ reaches Django, which has no such URL (404)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "True"


def test_bad_arguments_are_tool_errors_that_name_the_argument(mcp_kb, member_token):
    # given
    with live_chat_server() as base_url:
        # when
        def search(arguments):
            return tool_call(base_url, "search_knowledge_base", arguments, headers=bearer(member_token))

        too_many = search({"kb": "handbook", "query": RAG_QUESTION, "top_k": 100})
        no_query = search({"kb": "handbook"})
        bad_filter = search({"kb": "handbook", "query": RAG_QUESTION, "filters": [{"field": "部门", "op": "near"}]})
        too_long = search({"kb": "handbook", "query": "问" * 5000})
    # then
    assert too_many.is_error and too_many.structured_content["code"] == "invalid_arguments"
    assert [e["argument"] for e in too_many.structured_content["errors"]] == ["top_k"]
    assert too_many.content[0].text.startswith("参数无效 / Invalid arguments: top_k: ")
    assert no_query.is_error and [e["argument"] for e in no_query.structured_content["errors"]] == ["query"]
    assert bad_filter.is_error and bad_filter.structured_content["code"] == "invalid_filter"
    assert too_long.is_error and too_long.structured_content["code"] == "invalid_request"
    assert "question" in too_long.content[0].text and "问题过长" in too_long.content[0].text


# --- the README's snippet -------------------------------------------------------------------


def test_the_readme_python_snippet_runs(mcp_kb, member_token):
    # given: the snippet as the README shows it
    text = (ROOT / "README.md").read_text(encoding="utf-8").split("### MCP server", 1)[1].split("\n### ", 1)[0]
    snippet = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))  # the client configuration is JSON
    with live_chat_server() as base_url:
        # when
        run = subprocess.run(
            [sys.executable, "-c", snippet], capture_output=True, text=True, timeout=120,
            env={**os.environ, "RAGSITE_MCP_URL": mcp_url(base_url), "RAGSITE_TOKEN": member_token,
                 "RAGSITE_KB": "handbook"},
        )
    # then
    assert run.returncode == 0, run.stderr
    assert "['handbook']" in run.stdout
    assert "IT 服务台指南" in run.stdout
    assert "30 分钟" in run.stdout and "[来源 1]" in run.stdout
