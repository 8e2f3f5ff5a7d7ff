"""OpenAI-compatible adapters through the real `openai` SDK against the fake provider server."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from engines.ports import (
    ProviderBadResponse,
    ProviderError,
    ProviderInputTooLarge,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderUnavailable,
)
from engines.providers._common import RerankLimits
from engines.providers.openai_compat import (
    OpenAICaptioner,
    OpenAIChatModel,
    OpenAIEmbedder,
    OpenAIReranker,
    OpenAIRewriter,
)
from engines.tokens import count_tokens
from tests.fakes.provider_server import (
    Answer,
    Embeddings,
    Fail,
    Malformed,
    RerankResults,
    Slow,
    fake_vector,
)
from tests.engines.providers.conftest import (
    FAKE_API_KEY,
    QUESTION,
    assert_secret_free,
    assert_stream_abandoned,
    fake_connection,
)


@pytest.fixture
def connection(provider_server):
    return fake_connection(provider_server.openai_base_url)


# --- embeddings ---------------------------------------------------------------------------------


def test_embeddings_are_batched_as_floats_and_keep_order(provider_server, connection):
    # given
    embedder = OpenAIEmbedder(model="bge-m3", dimension=1536, batch_size=4, connection=connection)
    texts = [f"第{i}条制度" for i in range(10)]

    # when
    vectors = embedder.embed_documents(texts)

    # then
    sent = provider_server.requests("openai.embeddings")
    assert [len(r.body["input"]) for r in sent] == [4, 4, 2]
    assert all(r.body["encoding_format"] == "float" for r in sent)
    assert all("dimensions" not in r.body for r in sent)
    assert sent[0].authorization == f"Bearer {FAKE_API_KEY}"
    assert vectors[9] == pytest.approx(fake_vector(texts[9], 1536), abs=1e-6)
    assert all(math.isclose(math.fsum(v * v for v in vec), 1.0) for vec in vectors)


def test_dimensions_are_requested_only_when_asked(provider_server, connection):
    # given
    embedder = OpenAIEmbedder(
        model="text-embedding-3-small", dimension=256, send_dimensions=True, connection=connection
    )

    # when
    vector = embedder.embed_query("年假")

    # then
    (request,) = provider_server.requests()
    assert request.body["dimensions"] == 256
    assert len(vector) == 256


@pytest.mark.parametrize(
    "answer",
    [
        Embeddings(dimension=1024),
        Embeddings(drop_last=True),
        Embeddings(duplicate_first=True),
        Malformed(),
    ],
    ids=["wrong-dimension", "missing-vector", "duplicate-index", "malformed-json"],
)
def test_embedding_answers_breaking_the_contract_are_rejected(provider_server, connection, answer):
    # given
    provider_server.enqueue("openai.embeddings", answer)
    embedder = OpenAIEmbedder(model="bge-m3", dimension=1536, connection=connection)

    # when / then
    with pytest.raises(ProviderBadResponse):
        embedder.embed_documents(["甲", "乙"])


def test_over_long_text_is_refused_before_anything_is_sent(provider_server, connection):
    # given
    embedder = OpenAIEmbedder(
        model="bge-m3", dimension=1536, max_tokens_per_text=100, connection=connection
    )

    # when / then
    with pytest.raises(ProviderInputTooLarge):
        embedder.embed_documents(["短", "制度" * 200])
    assert provider_server.requests() == []


# --- retries and error mapping ------------------------------------------------------------------


def test_429_and_5xx_are_retried_then_succeed(provider_server, connection):
    # given
    provider_server.enqueue("openai.embeddings", Fail(429), Fail(502))
    embedder = OpenAIEmbedder(model="bge-m3", dimension=1536, connection=connection)

    # when
    embedder.embed_query("年假")

    # then
    assert len(provider_server.requests()) == 3


@pytest.mark.parametrize("status", [400, 404, 408, 409, 422])
def test_4xx_are_not_retried(provider_server, connection, status):
    # given
    provider_server.enqueue("openai.embeddings", Fail(status))
    embedder = OpenAIEmbedder(model="bge-m3", dimension=1536, connection=connection)

    # when / then
    with pytest.raises(ProviderUnavailable):
        embedder.embed_query("年假")
    assert len(provider_server.requests()) == 1


def test_rate_limit_exhaustion_maps_to_rate_limited(provider_server, connection):
    # given
    provider_server.enqueue("openai.chat", *[Fail(429, "rate_limit_exceeded")] * 3)
    chat = OpenAIChatModel(model="qwen2.5", connection=connection)

    # when / then
    with pytest.raises(ProviderRateLimited):
        chat.complete(QUESTION)
    assert len(provider_server.requests()) == 3


def test_a_slow_provider_maps_to_timeout_without_retry(provider_server, connection):
    # given
    provider_server.enqueue("openai.embeddings", Slow(2.0))
    embedder = OpenAIEmbedder(
        model="bge-m3", dimension=1536, connection=replace(connection, timeout=0.3)
    )

    # when / then
    with pytest.raises(ProviderTimeout):
        embedder.embed_query("年假")
    assert len(provider_server.requests()) == 1


def test_the_key_never_appears_in_errors_even_when_the_provider_echoes_it(
    provider_server, connection
):
    # given
    provider_server.enqueue(
        "openai.chat", Fail(401, "invalid_api_key", f"Incorrect API key provided: {FAKE_API_KEY}")
    )
    chat = OpenAIChatModel(model="qwen2.5", connection=connection)

    # when
    with pytest.raises(ProviderUnavailable) as caught:
        chat.complete(QUESTION)

    # then
    assert "credentials rejected" in str(caught.value)
    assert_secret_free(caught.value)


# --- rerank -------------------------------------------------------------------------------------


def test_rerank_posts_the_jina_format_to_the_rerank_path(provider_server, connection):
    # given
    reranker = OpenAIReranker(model="bge-reranker-v2-m3", connection=connection)
    documents = ["报销流程说明", "年假天数按工龄计算", "年假申请流程"]

    # when
    scores = reranker.rerank("年假申请", documents, top_n=2)

    # then
    (request,) = provider_server.requests("openai.rerank")
    assert request.path == "/v1/rerank"
    assert request.body == {
        "model": "bge-reranker-v2-m3",
        "query": "年假申请",
        "documents": documents,
        "top_n": 2,
    }
    assert [s.index for s in scores] == [2, 1]


def test_rerank_keeps_the_longest_prefix_within_the_token_budget(provider_server, connection):
    # given
    query = "报销需要哪些票据"
    documents = [f"文档{i}：报销时需提交发票原件和审批单。" for i in range(5)]
    per_document = count_tokens(query) + count_tokens(documents[0])
    reranker = OpenAIReranker(
        model="bge-reranker-v2-m3",
        limits=RerankLimits(
            max_documents=100, max_item_tokens=4000, max_request_tokens=per_document * 2
        ),
        connection=connection,
    )

    # when
    reranker.rerank(query, documents, top_n=5)

    # then
    (request,) = provider_server.requests("openai.rerank")
    assert request.body["documents"] == documents[:2]
    assert request.body["top_n"] == 2


def test_a_query_over_the_budget_is_refused(provider_server, connection):
    # given
    reranker = OpenAIReranker(
        model="bge-reranker-v2-m3",
        limits=RerankLimits(max_documents=100, max_item_tokens=10, max_request_tokens=1000),
        connection=connection,
    )

    # when / then
    with pytest.raises(ProviderInputTooLarge):
        reranker.rerank("请问公司今年的年假和病假制度分别是怎样规定的", ["年假"], top_n=1)
    assert provider_server.requests() == []


@pytest.mark.parametrize(
    "results",
    [
        [{"index": 2, "relevance_score": 0.9}],
        [{"index": 1, "relevance_score": 0.9}, {"index": 1, "relevance_score": 0.1}],
        [],
        [{"index": 0, "relevance_score": "high"}],
    ],
    ids=["out-of-range", "duplicate", "empty", "non-numeric-score"],
)
def test_rerank_answers_breaking_the_contract_are_rejected(provider_server, connection, results):
    # given
    provider_server.enqueue("openai.rerank", RerankResults(results))
    reranker = OpenAIReranker(model="bge-reranker-v2-m3", connection=connection)

    # when / then
    with pytest.raises(ProviderBadResponse):
        reranker.rerank("年假", ["年假五天", "病假"], top_n=2)


# --- rewrite ------------------------------------------------------------------------------------


def test_rewrite_uses_json_mode_and_validates(provider_server, connection):
    # given
    provider_server.enqueue("openai.chat", Answer('{"rewrite": "员工的年假天数如何计算"}'))
    rewriter = OpenAIRewriter(model="qwen2.5", connection=connection)

    # when
    rewrite = rewriter.rewrite("年假咋算")

    # then
    assert rewrite == "员工的年假天数如何计算"
    (request,) = provider_server.requests("openai.chat")
    assert request.body["response_format"] == {"type": "json_object"}
    assert request.body["model"] == "qwen2.5"


@pytest.mark.parametrize(
    "answer",
    ["好的", '{"rewrite": 42}', '{"rewrite": "年假 咋算"}'],
    ids=["not-json", "not-string", "identical"],
)
def test_invalid_rewrites_are_bad_responses(provider_server, connection, answer):
    # given
    provider_server.enqueue("openai.chat", Answer(answer))
    rewriter = OpenAIRewriter(model="qwen2.5", connection=connection)

    # when / then
    with pytest.raises(ProviderBadResponse):
        rewriter.rewrite("年假咋算")


# --- chat ---------------------------------------------------------------------------------------


def test_chat_streams_deltas_in_order(provider_server, connection):
    # given
    deltas = ("年假", "按工龄", "计算。")
    provider_server.enqueue("openai.chat", Answer(deltas=deltas))
    chat = OpenAIChatModel(model="qwen2.5", connection=connection)

    # when
    received = list(chat.stream(QUESTION, max_tokens=200, temperature=0.1))

    # then
    assert received == list(deltas)
    (request,) = provider_server.requests("openai.chat")
    assert request.body["stream"] is True
    assert request.body["max_tokens"] == 200
    assert request.body["messages"][1] == {"role": "user", "content": "年假有几天？"}


def test_nothing_is_sent_before_the_stream_is_read(provider_server, connection):
    # given
    chat = OpenAIChatModel(model="qwen2.5", connection=connection)

    # when
    chat.stream(QUESTION).close()

    # then
    assert provider_server.requests() == []


def test_closing_a_stream_early_stops_reading(provider_server, connection):
    # given
    provider_server.enqueue(
        "openai.chat", Answer(deltas=tuple(f"第{i}段" for i in range(200)), delay=0.01)
    )
    stream = OpenAIChatModel(model="qwen2.5", connection=connection).stream(QUESTION)

    # when
    first_two = [next(stream), next(stream)]
    stream.close()

    # then
    assert first_two == ["第0段", "第1段"]
    assert_stream_abandoned(provider_server)


def test_opening_a_stream_is_retried_on_5xx(provider_server, connection):
    # given
    provider_server.enqueue("openai.chat", Fail(500), Answer("好的。"))

    # when
    text = "".join(OpenAIChatModel(model="qwen2.5", connection=connection).stream(QUESTION))

    # then
    assert text == "好的。"
    assert len(provider_server.requests()) == 2


def test_an_error_event_mid_stream_is_raised_after_earlier_deltas(provider_server, connection):
    # given
    provider_server.enqueue("openai.chat", Answer(deltas=("一", "二", "三"), error_after=1))
    received = []

    # when
    with pytest.raises(ProviderError):
        for delta in OpenAIChatModel(model="qwen2.5", connection=connection).stream(QUESTION):
            received.append(delta)

    # then
    assert received == ["一"]


def test_a_stream_that_ends_without_finishing_is_a_bad_response(provider_server, connection):
    # given
    provider_server.enqueue("openai.chat", Answer(deltas=("一", "二"), finish=False))

    # when / then
    with pytest.raises(ProviderBadResponse):
        list(OpenAIChatModel(model="qwen2.5", connection=connection).stream(QUESTION))


def test_complete_returns_the_whole_answer(provider_server, connection):
    # given
    provider_server.enqueue("openai.chat", Answer("年假为每年5天。"))

    # when
    text = OpenAIChatModel(model="qwen2.5", connection=connection).complete(QUESTION)

    # then
    assert text == "年假为每年5天。"
    (request,) = provider_server.requests()
    assert request.body.get("stream") in (None, False)


# --- captions -----------------------------------------------------------------------------------


def test_caption_sends_the_image_as_a_data_uri(provider_server, connection):
    # given
    provider_server.enqueue("openai.chat", Answer("一张组织架构图。"))
    captioner = OpenAICaptioner(model="qwen2.5-vl", connection=connection)

    # when
    caption = captioner.caption(image_jpeg=b"\xff\xd8\xff\xe0fake", context="公司组织架构")

    # then
    assert caption == "图片：一张组织架构图。"
    (request,) = provider_server.requests("openai.chat")
    image, text = request.body["messages"][0]["content"]
    assert image["type"] == "image_url"
    assert image["image_url"]["url"].startswith("data:image/jpeg;base64,/9j/")
    assert "公司组织架构" in text["text"]
