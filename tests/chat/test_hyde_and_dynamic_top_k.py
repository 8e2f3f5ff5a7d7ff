"""HyDE and dynamic top-k in chat turns: the rules file's defaults per provider, the `enable_hyde`
option through the transports, and what the turn's trace records and the admin shows in words.

Turns run on real components (ingestion into Milvus Lite, the database, the real `openai` SDK at
the fake OpenAI-compatible server on 127.0.0.1, daphne for the WebSocket)."""

from __future__ import annotations

import json
import tomllib

import pytest
from django.contrib.auth.models import AnonymousUser
from django.urls import reverse
from websockets.sync.client import connect

from chat.contracts import ChatOptions, IntentResult
from chat.models import QueryTrace
from chat.pipeline.preparation import build_plan
from chat.pipeline.rules import DEFAULT_RULES_PATH, load_rules, parse_rules
from chat.serializers import ChatRequestInput
from ragsite.errors import Forbidden
from retrieval.service import HYDE_PROMPT
from tests.chat.conftest import RAG_QUESTION, live_chat_server, session_cookie_for, ws_url
from tests.fakes.provider_server import Answer, Fail, RerankResults
from tests.retrieval.pages import visible_text

HYPOTHESIS = "星河X3 的保修期为 24 个月，保修期内免费更换。"
MODEL_ANSWER = "星河X3 的保修期为 24 个月[来源 1]。"
INTENT = IntentResult("KNOWLEDGE_QUERY", 0.84, 0.84, "strong_knowledge_rule")


def rules_with(**retrieval):
    raw = tomllib.loads(DEFAULT_RULES_PATH.read_text(encoding="utf-8"))
    raw["retrieval"].update(retrieval)
    return parse_rules(raw)


def plan_for(rules, **options):
    return build_plan(RAG_QUESTION, options=ChatOptions(**options), rules=rules, follow_up=False, intent=INTENT)


def hyde_prompts(server) -> list[str]:
    return [
        r.body["messages"][-1]["content"] for r in server.requests("openai.chat")
        if isinstance(r.body, dict) and not r.body.get("stream")
        and r.body["messages"][-1]["content"] == HYDE_PROMPT.format(question=RAG_QUESTION)
    ]


def stored_trace(trace_id) -> dict:
    return QueryTrace.objects.get(trace_id=trace_id).full_details


# --- the plan -------------------------------------------------------------------------------------


def test_hyde_is_off_by_default_and_never_on_with_the_local_provider(settings):
    # given: the shipped rules, and rules that switch HyDE on for generative providers
    shipped, switched_on = load_rules(), rules_with(enable_hyde_remote=True)

    # when
    settings.RAG_PROVIDER = "openai"
    remote = [plan_for(shipped), plan_for(switched_on), plan_for(switched_on, enable_hyde=False),
              plan_for(shipped, enable_hyde=True)]
    settings.RAG_PROVIDER = "local"
    local = plan_for(switched_on)

    # then
    assert [plan.enable_hyde for plan in remote] == [False, True, False, True]
    assert local.enable_hyde is False
    assert plan_for(shipped).as_dict()["enable_hyde"] is False


def test_dynamic_top_k_follows_rerank_where_the_rules_switch_it_on(settings):
    # given: the shipped rules leave it off (measured: it only removed results on the demo set)
    settings.RAG_PROVIDER = "openai"
    shipped, switched_on = load_rules(), rules_with(dynamic_top_k_after_rerank=True)

    # when
    reranked, not_reranked, off = plan_for(switched_on), plan_for(switched_on, enable_rerank=False), plan_for(shipped)

    # then
    assert (reranked.enable_rerank, reranked.dynamic_top_k) == (True, True)
    assert not_reranked.dynamic_top_k is False
    assert (off.enable_rerank, off.dynamic_top_k) == (True, False)
    settings.RAG_PROVIDER = "local"
    assert plan_for(switched_on).dynamic_top_k is False  # the local provider does not rerank by default


@pytest.mark.django_db
def test_the_option_is_read_from_every_transports_body_and_is_for_signed_in_callers(member_user, settings):
    # given: the body every transport validates with ChatRequestInput (JSON, SSE, WebSocket)
    settings.RAG_PROVIDER = "openai"
    body = {"knowledge_base_id": "kb", "question": RAG_QUESTION}

    # when
    asked = ChatRequestInput.query_from({**body, "enable_hyde": True}, user=member_user)
    declined = ChatRequestInput.query_from({**body, "enable_hyde": False}, user=AnonymousUser())
    unset = ChatRequestInput.query_from(body, user=AnonymousUser())

    # then
    assert (asked.options.enable_hyde, declined.options.enable_hyde, unset.options.enable_hyde) == (True, False, None)
    with pytest.raises(Forbidden) as refused:
        ChatRequestInput.query_from({**body, "enable_hyde": True}, user=AnonymousUser())
    assert refused.value.code == "option_requires_login"


# --- turns ----------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_json_turn_with_enable_hyde_searches_with_a_hypothetical_answer(
    chat_kb, openai_provider, member_api, staff_user, client
):
    # given: the chat model writes the hypothetical answer, then the answer
    openai_provider.enqueue("openai.chat", Answer(text=HYPOTHESIS), Answer(text=MODEL_ANSWER))

    # when
    response = member_api.post("/api/chat", {
        "knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION, "enable_hyde": True,
        "enable_query_rewrite": False,
    }, format="json")

    # then: the plan says so, the model was asked, and the turn answered
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["hit_type"] == "rag"
    assert body["retrieval"]["plan"]["enable_hyde"] is True
    assert hyde_prompts(openai_provider) == [HYDE_PROMPT.format(question=RAG_QUESTION)]
    # then: the stored trace records whether it ran, its model, its time and the text's length
    hyde = stored_trace(body["trace_id"])["documents"]["hyde"]
    assert (hyde["status"], hyde["ran"], hyde["model"]) == ("ran", True, "openai:fake-chat")
    assert hyde["hypothesis_chars"] == len(HYPOTHESIS) and hyde["elapsed_ms"] > 0
    assert HYPOTHESIS not in json.dumps(stored_trace(body["trace_id"]), ensure_ascii=False)
    # then: the admin's trace page says it in words
    client.force_login(staff_user)
    trace = QueryTrace.objects.get(trace_id=body["trace_id"])
    page = visible_text(client.get(reverse("admin:chat_querytrace_change", args=[trace.pk])).content.decode())
    assert "已使用假设答案检索：模型 openai:fake-chat 用时" in page
    assert f"写出 {len(HYPOTHESIS)} 字" in page


@pytest.mark.django_db(transaction=True)
def test_a_failed_hyde_call_is_a_degradation_and_the_turn_still_answers(chat_kb, openai_provider, member_api):
    # given: the HyDE completion fails, the answer does not
    openai_provider.enqueue("openai.chat", Fail(503), Answer(text=MODEL_ANSWER))

    # when
    response = member_api.post("/api/chat", {
        "knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION, "enable_hyde": True,
        "enable_query_rewrite": False,
    }, format="json")

    # then
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["hit_type"], body["answer"]) == ("rag", MODEL_ANSWER.replace("[来源 1]", "[来源 1](citation://1)"))
    assert "hyde_failed" in body["retrieval"]["degradations"]
    documents = stored_trace(body["trace_id"])["documents"]
    assert (documents["hyde"]["status"], documents["hyde"]["error"]) == ("failed", "provider_unavailable")
    assert [e["channel"] for e in documents["channel_errors"]] == ["dense:hyde"]
    assert QueryTrace.objects.get(trace_id=body["trace_id"]).degradations == ["hyde_failed"]


@pytest.mark.django_db(transaction=True)
def test_a_local_turn_never_runs_hyde_and_anonymous_readers_may_not_ask(chat_kb, member_api, anonymous_api):
    # when: the offline provider, when a signed-in reader asks for it and by default (in this
    # order: without a model, both share one cached retrieval, whose notes are the first's)
    asked = member_api.post("/api/chat", {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION,
                                          "enable_hyde": True}, format="json").json()
    default = member_api.post("/api/chat", {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION},
                              format="json").json()
    anonymous = anonymous_api.post("/api/chat", {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION,
                                                 "enable_hyde": True}, format="json")

    # then: off in the plan; asked for, it is noted unavailable and the turn answers as usual
    assert default["retrieval"]["plan"]["enable_hyde"] is False
    assert stored_trace(default["trace_id"])["documents"]["hyde"] is None
    documents = stored_trace(asked["trace_id"])["documents"]
    assert asked["retrieval"]["plan"]["enable_hyde"] is True and asked["hit_type"] == "rag"
    assert "hyde_unavailable" in documents["notes"] and documents["hyde"] is None
    assert asked["retrieval"]["degradations"] == []
    assert (anonymous.status_code, anonymous.json()["code"]) == (403, "option_requires_login")


@pytest.mark.django_db(transaction=True)
def test_a_reranked_turn_cuts_at_the_score_cliff_and_its_trace_shows_the_cut(
    chat_kb, openai_provider, member_api, staff_user, client, settings, tmp_path
):
    # given: rules that cut after rerank
    rules = tmp_path / "rules.toml"
    rules.write_text(DEFAULT_RULES_PATH.read_text(encoding="utf-8").replace(
        "dynamic_top_k_after_rerank = false", "dynamic_top_k_after_rerank = true"), encoding="utf-8")
    settings.RAG_CHAT_RULES_FILE = str(rules)
    # given: the reranker scores the first three candidates with a cliff after the second
    openai_provider.enqueue("openai.rerank", RerankResults([
        {"index": 0, "relevance_score": 0.93}, {"index": 1, "relevance_score": 0.9},
        {"index": 2, "relevance_score": 0.2},
    ]))
    openai_provider.enqueue("openai.chat", Answer(text=MODEL_ANSWER))

    # when: a remote provider (rerank on, so dynamic top-k on)
    response = member_api.post("/api/chat", {
        "knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION, "enable_query_rewrite": False,
    }, format="json")

    # then: the plan and the trace record the cut; the evidence is what it kept
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["retrieval"]["plan"]["enable_rerank"], body["retrieval"]["plan"]["dynamic_top_k"]) == (True, True)
    details = stored_trace(body["trace_id"])
    assert details["documents"]["dynamic_top_k"] == {
        "kept": 2, "max_k": 10, "scored": 3, "cut_index": 2, "score_before": 0.9, "score_after": 0.2,
        "cliff": "relative",
    }
    trace = QueryTrace.objects.get(trace_id=body["trace_id"])
    assert len(trace.assistant_message.evidence.retrieval_results) == 2
    # then: in words on the admin's trace page
    client.force_login(staff_user)
    page = visible_text(client.get(reverse("admin:chat_querytrace_change", args=[trace.pk])).content.decode())
    assert "动态返回条数：保留 2 条（最多 10 条），从第 3 条起截断：重排分 0.9000 → 0.2000，比上一条下降超过 25%" in page


@pytest.mark.django_db(transaction=True)
def test_a_websocket_question_may_ask_for_hyde(chat_kb, openai_provider, member_user):
    # given
    openai_provider.enqueue("openai.chat", Answer(text=HYPOTHESIS), Answer(text=MODEL_ANSWER))
    with live_chat_server() as base_url:
        cookies = session_cookie_for(member_user)
        with connect(ws_url(base_url), origin=base_url, proxy=None, open_timeout=30,
                     additional_headers={"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}) as socket:
            # when
            socket.send(json.dumps({"type": "question", "knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION,
                                    "enable_hyde": True, "enable_query_rewrite": False}))
            events = []
            while not events or events[-1]["type"] not in ("end", "error"):
                events.append(json.loads(socket.recv(timeout=60)))

    # then
    end = events[-1]
    assert end["type"] == "end", end
    assert end["retrieval"]["plan"]["enable_hyde"] is True
    assert hyde_prompts(openai_provider) == [HYDE_PROMPT.format(question=RAG_QUESTION)]
    assert stored_trace(end["trace_id"])["documents"]["hyde"]["ran"] is True
