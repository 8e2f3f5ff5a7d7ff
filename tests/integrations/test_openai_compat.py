"""`/v1/chat/completions` and `/v1/models` through the stock `openai` SDK (sync and async)
against a real daphne on the test database, the pipeline answering with the local provider
(or the fake OpenAI-compatible model where a test needs a slow or failing model)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import openai
import pytest

from chat.models import ChatEvidence, Message, MessageRole, MessageStatus, QueryTrace, TraceStatus
from chat.pipeline.citations import readable_markers
from ragsite.throttles import SCOPES
from tests.chat.conftest import GREETING, RAG_ANSWER_FACT, RAG_QUESTION, csrf_pair, live_chat_server, session_cookie_for
from tests.fakes.provider_server import Answer
from tests.integrations.conftest import async_openai_client, openai_client
from tests.live import eventually

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = ("星河X3 的保修期", "为 24 个月", "[来源 1]", "。")


def assert_stored_as_answered(ragsite: dict, text: str) -> Message:
    """The answer is the stored turn: its message, its evidence (the same citations) and its
    completed trace."""
    message = Message.objects.get(pk=ragsite["message_id"])
    # The stored text keeps the chat page's citation links; the client reads them as "[来源 N]".
    assert (message.role, message.status, readable_markers(message.content)) == (MessageRole.ASSISTANT, MessageStatus.COMPLETE, text)
    assert str(message.conversation_id) == ragsite["conversation_id"]
    assert str(message.trace_id) == ragsite["trace_id"]
    evidence = ChatEvidence.objects.get(message=message)
    assert evidence.citations == ragsite["citations"]
    assert evidence.hit_type == ragsite["hit_type"]
    trace = QueryTrace.objects.get(trace_id=ragsite["trace_id"])
    assert (trace.status, trace.assistant_message_id) == (TraceStatus.COMPLETED, message.pk)
    return message


# --- answers ------------------------------------------------------------------------------------


def test_a_json_answer_is_the_stored_turn_with_its_citations(chat_kb, member_token):
    with live_chat_server() as base_url:
        client = openai_client(base_url, member_token)
        # when
        completion = client.chat.completions.create(
            model=chat_kb.slug, messages=[{"role": "system", "content": "你是助手"},
                                          {"role": "user", "content": RAG_QUESTION}],
            temperature=0.2, max_tokens=100, user="employee-7",
        )

    # then: OpenAI's object, the pipeline's text with its source markers
    choice = completion.choices[0]
    assert completion.object == "chat.completion" and completion.model == chat_kb.slug
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert RAG_ANSWER_FACT in choice.message.content and "[来源 1]" in choice.message.content and "citation://" not in choice.message.content
    # then: the extension names the stored answer; the id's number is its message id
    ragsite = completion.model_extra["ragsite"]
    assert completion.id == f"chatcmpl-{ragsite['message_id']}"
    assert ragsite["hit_type"] == "rag" and ragsite["clarify"] is None
    assert ragsite["citations"] and ragsite["citations"][0]["cited"] is True
    assert_stored_as_answered(ragsite, choice.message.content)
    # then: usage counted with the tokenizer (the messages sent, the answer)
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens


def test_a_streamed_answer_arrives_as_chunks_with_the_extension_and_usage_last(chat_kb, member_token):
    with live_chat_server() as base_url:
        client = openai_client(base_url, member_token)
        # when
        stream = client.chat.completions.create(
            model=chat_kb.slug, messages=[{"role": "user", "content": [{"type": "text", "text": RAG_QUESTION}]}],
            stream=True, stream_options={"include_usage": True},
        )
        chunks = list(stream)

    # then: the role first, the text, the stop chunk carrying `ragsite`, then usage alone
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    stops = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in stops] == ["stop"]
    ragsite = stops[0].model_extra["ragsite"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert all(c.object == "chat.completion.chunk" and c.id == f"chatcmpl-{ragsite['trace_id']}" for c in chunks)
    assert RAG_ANSWER_FACT in text and "[来源 1]" in text and "citation://" not in text
    assert_stored_as_answered(ragsite, text)


def test_the_sdks_stream_helper_assembles_the_answer(chat_kb, member_token):
    with live_chat_server() as base_url:
        client = openai_client(base_url, member_token)
        # when: the SDK's own accumulator reads the chunks
        with client.chat.completions.stream(
            model=chat_kb.slug, messages=[{"role": "user", "content": RAG_QUESTION}],
            stream_options={"include_usage": True},
        ) as stream:
            events = [event.type for event in stream]
            final = stream.get_final_completion()
    # then
    assert "content.delta" in events and "content.done" in events
    assert final.choices[0].finish_reason == "stop" and RAG_ANSWER_FACT in final.choices[0].message.content
    assert final.usage.completion_tokens > 0
    assert readable_markers(Message.objects.get(role=MessageRole.ASSISTANT).content) == final.choices[0].message.content


def test_the_async_client_streams_and_answers_whole(chat_kb, member_token):
    async def ask(base_url: str):
        async with async_openai_client(base_url, member_token) as client:
            whole = await client.chat.completions.create(
                model=chat_kb.slug, messages=[{"role": "user", "content": RAG_QUESTION}])
            stream = await client.chat.completions.create(
                model=chat_kb.slug, messages=[{"role": "user", "content": RAG_QUESTION}], stream=True)
            chunks = [chunk async for chunk in stream]
        return whole, chunks

    with live_chat_server() as base_url:
        # when
        whole, chunks = asyncio.run(ask(base_url))

    # then: the same answer both ways, each its own stored turn; no usage chunk unless asked
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert all(c.choices and c.usage is None for c in chunks)
    first = assert_stored_as_answered(whole.model_extra["ragsite"], text)
    second = assert_stored_as_answered(chunks[-1].model_extra["ragsite"], text)
    assert first.conversation_id != second.conversation_id  # stateless: a conversation per request


def test_a_conversation_is_continued_through_the_extension(chat_kb, member_token):
    with live_chat_server() as base_url:
        client = openai_client(base_url, member_token)
        # given: a first answer
        first = client.chat.completions.create(model=chat_kb.slug, messages=[{"role": "user", "content": RAG_QUESTION}])
        conversation = first.model_extra["ragsite"]["conversation_id"]
        # when: the follow-up names the conversation
        follow_up = client.chat.completions.create(
            model=chat_kb.slug,
            messages=[{"role": "user", "content": RAG_QUESTION},
                      {"role": "assistant", "content": first.choices[0].message.content},
                      {"role": "user", "content": "那星河X5 呢？"}],
            extra_body={"ragsite": {"conversation_id": conversation}},
        )

    # then: one conversation of two turns, the follow-up rewritten with the first question
    assert follow_up.model_extra["ragsite"]["conversation_id"] == conversation
    assert Message.objects.filter(conversation_id=conversation, role=MessageRole.ASSISTANT).count() == 2
    assert "36 个月" in follow_up.choices[0].message.content


# --- models -------------------------------------------------------------------------------------


def test_models_are_the_knowledge_bases_the_caller_may_read(chat_kb, hidden_kb, member_token, engineer_token):
    with live_chat_server() as base_url:
        member = openai_client(base_url, member_token)
        # when
        listed = member.models.list()
        one = member.models.retrieve(chat_kb.slug)
        with pytest.raises(openai.NotFoundError) as hidden:
            member.models.retrieve(hidden_kb.slug)
        with pytest.raises(openai.NotFoundError) as missing:
            member.models.retrieve("no-such-kb")
        engineer_sees = [m.id for m in openai_client(base_url, engineer_token).models.list()]
        with httpx.Client(base_url=base_url) as plain:
            token_scheme = plain.get("/v1/models", headers={"Authorization": f"Token {member_token}"})

    # then
    assert [m.id for m in listed] == [chat_kb.slug]
    assert (one.id, one.object, one.owned_by) == (chat_kb.slug, "model", "ragsite")
    assert one.created == int(chat_kb.created_at.timestamp())
    assert sorted(engineer_sees) == sorted([chat_kb.slug, hidden_kb.slug])
    assert [m["id"] for m in token_scheme.json()["data"]] == [chat_kb.slug]
    # then: hidden answers exactly as missing, in OpenAI's error shape
    assert hidden.value.status_code == missing.value.status_code == 404
    assert hidden.value.body == {**missing.value.body, "message": missing.value.body["message"].replace(
        "no-such-kb", hidden_kb.slug)}
    assert hidden.value.body["code"] == "model_not_found" and hidden.value.body["type"] == "invalid_request_error"


def test_asking_a_hidden_knowledge_base_is_refused_as_a_missing_one(hidden_kb, member_token):
    with live_chat_server() as base_url:
        client = openai_client(base_url, member_token)
        # when
        errors = []
        for model in (hidden_kb.slug, "no-such-kb"):
            with pytest.raises(openai.NotFoundError) as refused:
                client.chat.completions.create(model=model, messages=[{"role": "user", "content": GREETING}])
            errors.append(refused.value)

    # then
    hidden, missing = errors
    assert hidden.body["message"].replace(hidden_kb.slug, "no-such-kb") == missing.body["message"]
    assert hidden.body["code"] == missing.body["code"] == "model_not_found"
    assert hidden.body["param"] == "model"


# --- refusals -----------------------------------------------------------------------------------


def test_a_wrong_token_is_an_authentication_error(chat_kb):
    with live_chat_server() as base_url:
        client = openai_client(base_url, "not-a-token")
        # when / then
        with pytest.raises(openai.AuthenticationError) as asking:
            client.chat.completions.create(model=chat_kb.slug, messages=[{"role": "user", "content": GREETING}])
        with pytest.raises(openai.AuthenticationError) as listing:
            client.models.list()
    for refused in (asking.value, listing.value):
        assert refused.status_code == 401 and refused.body["code"] == "invalid_api_key"
        assert refused.response.headers["WWW-Authenticate"] == "Bearer"
    assert not Message.objects.exists()


@pytest.mark.parametrize(("extra", "param", "code"), [
    ({"n": 2}, "n", "unsupported_n"),
    ({"n": True}, "n", "unsupported_n"),  # true == 1 in Python, not a count in JSON
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools", "tools_unsupported"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]},
     "messages[0].content[0]", "unsupported_content"),
    ({"messages": [{"role": "user", "content": "问"}, {"role": "assistant", "content": "答"}]},
     "messages[1].role", "invalid_messages"),
    ({"extra_body": {"ragsite": {"filters": "部门"}}}, "ragsite.filters", "invalid_filter"),
    ({"extra_body": {"ragsite": {"history": []}}}, "ragsite.history", "invalid_request"),
    ({"response_format": {"type": "json_object"}}, "response_format", "unsupported_response_format"),
])
def test_what_ragsite_cannot_do_is_a_clear_bad_request(chat_kb, member_token, extra, param, code):
    body = {"model": chat_kb.slug, "messages": [{"role": "user", "content": GREETING}], **extra}
    with live_chat_server() as base_url:
        client = openai_client(base_url, member_token)
        # when
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(**body)
    # then
    assert (refused.value.body["param"], refused.value.body["code"]) == (param, code)
    assert refused.value.body["message"]
    assert not Message.objects.exists()


def test_the_chat_rate_limit_is_a_rate_limit_error_with_retry_after(chat_kb, member_token, settings):
    # given: one question a minute for signed-in users
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK,
                               "DEFAULT_THROTTLE_RATES": {scope: None for scope in SCOPES} | {"chat_user": "1/min"}}
    with live_chat_server() as base_url:
        client = openai_client(base_url, member_token)
        client.chat.completions.create(model=chat_kb.slug, messages=[{"role": "user", "content": GREETING}])
        # when
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model=chat_kb.slug, messages=[{"role": "user", "content": GREETING}],
                                           stream=True)
    # then
    assert refused.value.status_code == 429 and refused.value.body["code"] == "throttled"
    assert 1 <= int(refused.value.response.headers["Retry-After"]) <= 60
    assert refused.value.body["retry_after"] == int(refused.value.response.headers["Retry-After"])


def test_a_server_too_busy_answers_503_with_retry_after(chat_kb, member_token, openai_provider, settings):
    # given: one answer at a time, waits of 0.5 s, a first answer whose model is silent for 4 s
    settings.RAG_CHAT_MAX_ACTIVE_TURNS = 1
    settings.RAG_CHAT_QUEUE_TIMEOUT_SECONDS = 0.5
    openai_provider.enqueue("openai.chat", Answer(deltas=ANSWER, first_delay=4.0))
    with live_chat_server() as base_url:
        client = openai_client(base_url, member_token)
        first: list = []
        body = {"model": chat_kb.slug, "messages": [{"role": "user", "content": RAG_QUESTION}],
                "extra_body": {"ragsite": {"enable_query_rewrite": False}}}
        asking = threading.Thread(target=lambda: first.append(client.chat.completions.create(**body)))
        asking.start()
        assert eventually(lambda: openai_provider.open_streams == 1, within=30)
        # when
        with pytest.raises(openai.InternalServerError) as refused:
            client.chat.completions.create(model=chat_kb.slug, messages=[{"role": "user", "content": "星河X3 保修多久？"}])
        asking.join(timeout=60)

    # then
    assert refused.value.status_code == 503 and refused.value.body["code"] == "server_busy"
    assert int(refused.value.response.headers["Retry-After"]) == settings.RAG_BUSY_RETRY_AFTER_SECONDS
    assert first[0].choices[0].message.content == "星河X3 的保修期为 24 个月[来源 1]。"


def test_a_model_failing_mid_stream_is_an_error_the_sdk_raises(chat_kb, member_token, openai_provider):
    # given: a model that fails after two deltas
    openai_provider.enqueue("openai.chat", Answer(deltas=ANSWER, error_after=2))
    with live_chat_server() as base_url:
        client = openai_client(base_url, member_token)
        stream = client.chat.completions.create(
            model=chat_kb.slug, messages=[{"role": "user", "content": RAG_QUESTION}], stream=True,
            extra_body={"ragsite": {"enable_query_rewrite": False}},
        )
        received = []
        # when / then
        with pytest.raises(openai.APIError) as failed:
            for chunk in stream:
                received.append(chunk)
    assert failed.value.body["code"] == "generation_failed" and failed.value.body["type"] == "server_error"
    assert received[0].choices[0].delta.role == "assistant"
    assert Message.objects.get(role=MessageRole.ASSISTANT).status == MessageStatus.ERROR


def test_a_model_failing_a_json_answer_is_a_502(chat_kb, member_token, openai_provider):
    # given: a model that fails after two deltas
    openai_provider.enqueue("openai.chat", Answer(deltas=ANSWER, error_after=2))
    with live_chat_server() as base_url:
        client = openai_client(base_url, member_token)
        # when
        with pytest.raises(openai.InternalServerError) as failed:
            client.chat.completions.create(model=chat_kb.slug, messages=[{"role": "user", "content": RAG_QUESTION}],
                                           extra_body={"ragsite": {"enable_query_rewrite": False}})
    # then
    assert failed.value.status_code == 502 and failed.value.body["code"] == "generation_failed"
    assert Message.objects.get(role=MessageRole.ASSISTANT).status == MessageStatus.ERROR


def test_a_reader_leaving_mid_stream_cancels_the_turn(chat_kb, member_token, openai_provider):
    # given: a model that would take 30 s to its first token
    openai_provider.enqueue("openai.chat", Answer(deltas=ANSWER, first_delay=30.0))
    with live_chat_server() as base_url:
        client = openai_client(base_url, member_token)
        # when: the reader takes the first chunk, then hangs up
        stream = client.chat.completions.create(
            model=chat_kb.slug, messages=[{"role": "user", "content": RAG_QUESTION}], stream=True,
            extra_body={"ragsite": {"enable_query_rewrite": False}},
        )
        next(iter(stream))
        stream.close()
        # then: the turn is stored as cancelled long before the model would have spoken
        trace = eventually(lambda: QueryTrace.objects.filter(status=TraceStatus.CANCELLED).first(), within=15)
    assert trace is not None
    assert Message.objects.get(trace_id=trace.trace_id, role=MessageRole.ASSISTANT).status == MessageStatus.CANCELLED


# --- the README's example -----------------------------------------------------------------------


def test_the_readme_example_runs_against_the_server(chat_kb, member_token, capsys):
    # given: the snippet's Python, pointed at a live server, a real token and a knowledge base
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8").split(
        "### OpenAI-compatible chat completions", 1)[1]
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    with live_chat_server() as base_url:
        runnable = (code.replace("http://127.0.0.1:8000/v1", f"{base_url}/v1").replace("<token>", member_token)
                    .replace('"demo"', f'"{chat_kb.slug}"'))
        assert runnable != code
        # when
        exec(compile(runnable, "README.md", "exec"), {})

    # then: it listed the model, printed both answers and the stored message's id
    printed = capsys.readouterr().out
    assert chat_kb.slug in printed and printed.count("30 分钟") == 2
    answers = Message.objects.filter(role=MessageRole.ASSISTANT, status=MessageStatus.COMPLETE)
    assert answers.count() == 2 and str(answers.order_by("pk").first().pk) in printed


def test_an_anonymous_caller_asks_public_knowledge_bases_only(chat_kb, hidden_kb):
    with live_chat_server() as base_url, httpx.Client(base_url=base_url, timeout=60) as plain:
        # when: no Authorization header at all
        body = {"messages": [{"role": "user", "content": RAG_QUESTION}]}
        public = plain.post("/v1/chat/completions", json={**body, "model": chat_kb.slug})
        hidden = plain.post("/v1/chat/completions", json={**body, "model": hidden_kb.slug})
        models = plain.get("/v1/models")
    # then
    assert public.status_code == 200 and RAG_ANSWER_FACT in public.json()["choices"][0]["message"]["content"]
    assert (hidden.status_code, hidden.json()["error"]["code"]) == (404, "model_not_found")
    assert [m["id"] for m in models.json()["data"]] == [chat_kb.slug]


def test_a_signed_in_page_asks_with_its_session_and_csrf_token(chat_kb, member_user):
    # given: a browser signed in as a member, with and without its CSRF token
    cookies, csrf = csrf_pair()
    signed_in = {**session_cookie_for(member_user), **cookies}
    body = {"model": chat_kb.slug, "messages": [{"role": "user", "content": GREETING}]}
    with live_chat_server() as base_url, httpx.Client(base_url=base_url, cookies=signed_in, timeout=60) as browser:
        # when
        forged = browser.post("/v1/chat/completions", json=body)
        asked = browser.post("/v1/chat/completions", json=body, headers=csrf)
    # then: the session's CSRF check holds, in OpenAI's error shape
    assert (forged.status_code, forged.json()["error"]["code"]) == (403, "csrf_failed")
    assert asked.status_code == 200
    message = Message.objects.get(pk=asked.json()["ragsite"]["message_id"])
    assert message.conversation.user == member_user
