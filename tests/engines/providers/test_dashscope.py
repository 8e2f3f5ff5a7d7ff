"""DashScope adapters through the real `dashscope` SDK against the fake provider server."""

from __future__ import annotations

import math
import socket
from dataclasses import replace

import pytest

from engines.ports import (
    ProviderBadResponse,
    ProviderError,
    ProviderInputTooLarge,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderUnavailable,
    RerankScore,
)
from engines.providers._common import EMPTY_TEXT_PLACEHOLDER, RerankLimits
from engines.providers.dashscope import (
    DashScopeCaptioner,
    DashScopeChatModel,
    DashScopeEmbedder,
    DashScopeReranker,
    DashScopeRewriter,
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


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def connection(provider_server):
    return fake_connection(provider_server.dashscope_base_url)


# --- embeddings ---------------------------------------------------------------------------------


def test_embeddings_are_batched_within_ten_texts_and_keep_order(provider_server, connection):
    # given
    embedder = DashScopeEmbedder(model="text-embedding-v4", dimension=1024, connection=connection)
    texts = [f"第{i}条制度说明" for i in range(23)]

    # when
    vectors = embedder.embed_documents(texts)

    # then
    sent = provider_server.requests("dashscope.embeddings")
    assert [len(r.body["input"]["texts"]) for r in sent] == [10, 10, 3]
    assert [t for r in sent for t in r.body["input"]["texts"]] == texts
    assert all(r.body["model"] == "text-embedding-v4" for r in sent)
    assert all(r.body["parameters"] == {"dimension": 1024, "text_type": "document"} for r in sent)
    assert vectors[7] == pytest.approx(fake_vector(texts[7], 1024), abs=1e-6)
    assert all(math.isclose(math.fsum(v * v for v in vec), 1.0) for vec in vectors)


def test_query_embedding_asks_for_the_query_side(provider_server, connection):
    # given
    embedder = DashScopeEmbedder(dimension=512, connection=connection)

    # when
    vector = embedder.embed_query("年假怎么申请")

    # then
    (request,) = provider_server.requests("dashscope.embeddings")
    assert request.body["parameters"] == {"dimension": 512, "text_type": "query"}
    assert len(vector) == 512


def test_the_key_is_sent_as_bearer_token_per_call(provider_server, connection):
    # given
    embedder = DashScopeEmbedder(connection=connection)

    # when
    embedder.embed_query("报销")

    # then
    (request,) = provider_server.requests()
    assert request.authorization == f"Bearer {FAKE_API_KEY}"
    assert FAKE_API_KEY not in repr(embedder.__dict__)


def test_answers_out_of_index_order_are_reordered(provider_server, connection):
    # given
    provider_server.enqueue("dashscope.embeddings", Embeddings(reverse=True))
    embedder = DashScopeEmbedder(dimension=64, connection=connection)

    # when
    vectors = embedder.embed_documents(["甲", "乙", "丙"])

    # then
    assert vectors[0] == pytest.approx(fake_vector("甲", 64), abs=1e-6)
    assert vectors[2] == pytest.approx(fake_vector("丙", 64), abs=1e-6)


@pytest.mark.parametrize(
    "answer",
    [
        Embeddings(dimension=768),
        Embeddings(drop_last=True),
        Embeddings(duplicate_first=True),
        Malformed(),
    ],
    ids=["wrong-dimension", "missing-vector", "duplicate-index", "malformed-json"],
)
def test_embedding_answers_breaking_the_contract_are_rejected(provider_server, connection, answer):
    # given
    provider_server.enqueue("dashscope.embeddings", answer)
    embedder = DashScopeEmbedder(dimension=1024, connection=connection)

    # when / then
    with pytest.raises(ProviderBadResponse):
        embedder.embed_documents(["甲", "乙", "丙"])


def test_over_long_text_is_refused_before_anything_is_sent(provider_server, connection):
    # given
    embedder = DashScopeEmbedder(connection=connection)
    too_long = "制度" * 9000

    # when
    with pytest.raises(ProviderInputTooLarge):
        embedder.embed_documents(["短文本", too_long])

    # then
    assert provider_server.requests() == []


def test_empty_texts_are_sent_as_a_placeholder(provider_server, connection):
    # given
    embedder = DashScopeEmbedder(dimension=64, connection=connection)

    # when
    vectors = embedder.embed_documents(["", "  "])

    # then
    (request,) = provider_server.requests()
    assert request.body["input"]["texts"] == [EMPTY_TEXT_PLACEHOLDER, EMPTY_TEXT_PLACEHOLDER]
    assert vectors[0] == vectors[1]


# --- retries and error mapping ------------------------------------------------------------------


def test_429_and_5xx_are_retried_then_succeed(provider_server, connection):
    # given
    provider_server.enqueue(
        "dashscope.embeddings", Fail(429, "Throttling.RateQuota"), Fail(503, "ServiceUnavailable")
    )
    embedder = DashScopeEmbedder(dimension=64, connection=connection)

    # when
    vector = embedder.embed_query("年假")

    # then
    assert len(provider_server.requests()) == 3
    assert vector == pytest.approx(fake_vector("年假", 64), abs=1e-6)


def test_400_is_not_retried(provider_server, connection):
    # given
    provider_server.enqueue("dashscope.embeddings", Fail(400, "InvalidParameter"))
    embedder = DashScopeEmbedder(connection=connection)

    # when
    with pytest.raises(ProviderUnavailable) as caught:
        embedder.embed_query("年假")

    # then
    assert len(provider_server.requests()) == 1
    assert "HTTP 400 InvalidParameter" in str(caught.value)


def test_rate_limit_exhaustion_maps_to_rate_limited(provider_server, connection):
    # given
    provider_server.enqueue("dashscope.embeddings", *[Fail(429, "Throttling")] * 3)
    embedder = DashScopeEmbedder(connection=connection)

    # when
    with pytest.raises(ProviderRateLimited):
        embedder.embed_query("年假")

    # then: the first try and max_retries=2 retries
    assert len(provider_server.requests()) == 3


def test_server_errors_after_retries_map_to_unavailable(provider_server, connection):
    # given
    provider_server.enqueue("dashscope.rerank", *[Fail(500)] * 3)
    reranker = DashScopeReranker(connection=connection)

    # when / then
    with pytest.raises(ProviderUnavailable):
        reranker.rerank("年假", ["年假五天"], top_n=1)
    assert len(provider_server.requests()) == 3


def test_a_slow_provider_maps_to_timeout_without_retry(provider_server, connection):
    # given
    provider_server.enqueue("dashscope.embeddings", Slow(2.0))
    embedder = DashScopeEmbedder(connection=replace(connection, timeout=0.3))

    # when / then
    with pytest.raises(ProviderTimeout):
        embedder.embed_query("年假")
    assert len(provider_server.requests()) == 1


def test_connection_refused_maps_to_unavailable():
    # given
    embedder = DashScopeEmbedder(
        connection=fake_connection(f"http://127.0.0.1:{unused_port()}/api/v1")
    )

    # when / then
    with pytest.raises(ProviderUnavailable) as caught:
        embedder.embed_query("年假")
    assert_secret_free(caught.value)


def test_the_key_never_appears_in_errors_even_when_the_provider_echoes_it(
    provider_server, connection
):
    # given
    provider_server.enqueue(
        "dashscope.generation", Fail(401, "InvalidApiKey", f"Invalid API-key {FAKE_API_KEY}")
    )
    rewriter = DashScopeRewriter(connection=connection)

    # when
    with pytest.raises(ProviderError) as caught:
        rewriter.rewrite("年假怎么算")

    # then
    assert "credentials rejected" in str(caught.value)
    assert_secret_free(caught.value)


# --- rerank -------------------------------------------------------------------------------------


def test_rerank_sends_one_batch_and_returns_best_first(provider_server, connection):
    # given
    reranker = DashScopeReranker(model="qwen3-rerank", connection=connection)
    documents = ["报销流程说明", "年假天数按工龄计算", "年假申请流程"]

    # when
    scores = reranker.rerank("年假申请", documents, top_n=2)

    # then
    (request,) = provider_server.requests("dashscope.rerank")
    assert request.body["model"] == "qwen3-rerank"
    assert request.body["input"] == {"query": "年假申请", "documents": documents}
    assert request.body["parameters"] == {"return_documents": False, "top_n": 2}
    assert [s.index for s in scores] == [2, 1]
    assert scores[0].score >= scores[1].score


def test_rerank_keeps_the_longest_prefix_within_the_token_budget(provider_server, connection):
    # given
    query = "年假怎么申请"
    documents = [f"第{i}份文档：年假申请需要提前三天在系统中提交。" for i in range(6)]
    per_document = count_tokens(query) + count_tokens(documents[0])
    budget = per_document * 4 + per_document // 2  # four fit, the fifth does not
    reranker = DashScopeReranker(
        limits=RerankLimits(max_documents=500, max_item_tokens=4000, max_request_tokens=budget),
        connection=connection,
    )

    # when
    scores = reranker.rerank(query, documents, top_n=10)

    # then
    (request,) = provider_server.requests("dashscope.rerank")
    assert request.body["input"]["documents"] == documents[:4]
    assert request.body["parameters"]["top_n"] == 4
    assert sorted(s.index for s in scores) == [0, 1, 2, 3]


def test_rerank_sends_at_most_the_document_limit(provider_server, connection):
    # given
    reranker = DashScopeReranker(
        limits=RerankLimits(max_documents=3, max_item_tokens=4000, max_request_tokens=120_000),
        connection=connection,
    )

    # when
    reranker.rerank("年假", [f"文档{i}" for i in range(10)], top_n=5)

    # then
    (request,) = provider_server.requests("dashscope.rerank")
    assert len(request.body["input"]["documents"]) == 3


def test_an_over_long_query_is_refused_not_truncated(provider_server, connection):
    # given
    reranker = DashScopeReranker(connection=connection)

    # when / then
    with pytest.raises(ProviderInputTooLarge):
        reranker.rerank("年假" * 5000, ["年假五天"], top_n=1)
    assert provider_server.requests() == []


@pytest.mark.parametrize(
    "results",
    [
        [{"index": 3, "relevance_score": 0.9}],
        [{"index": -1, "relevance_score": 0.9}],
        [{"index": 0, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.8}],
        [],
        [{"index": 0}],
    ],
    ids=["out-of-range", "negative", "duplicate", "empty", "no-score"],
)
def test_rerank_answers_breaking_the_contract_are_rejected(provider_server, connection, results):
    # given
    provider_server.enqueue("dashscope.rerank", RerankResults(results))
    reranker = DashScopeReranker(connection=connection)

    # when / then
    with pytest.raises(ProviderBadResponse):
        reranker.rerank("年假", ["年假五天", "病假", "事假"], top_n=3)


def test_rerank_orders_by_score_and_cuts_to_top_n(provider_server, connection):
    # given
    provider_server.enqueue(
        "dashscope.rerank",
        RerankResults(
            [
                {"index": 0, "relevance_score": 0.2},
                {"index": 2, "relevance_score": 0.9},
                {"index": 1, "relevance_score": 0.5},
            ]
        ),
    )
    reranker = DashScopeReranker(connection=connection)

    # when
    scores = reranker.rerank("年假", ["甲", "乙", "丙"], top_n=2)

    # then
    assert scores == [RerankScore(2, 0.9), RerankScore(1, 0.5)]


# --- rewrite ------------------------------------------------------------------------------------


def test_rewrite_asks_for_a_json_object_and_returns_the_variant(provider_server, connection):
    # given
    provider_server.enqueue("dashscope.generation", Answer('{"rewrite": "员工的年假天数如何计算"}'))
    rewriter = DashScopeRewriter(model="qwen-plus", connection=connection)

    # when
    rewrite = rewriter.rewrite("年假咋算")

    # then
    assert rewrite == "员工的年假天数如何计算"
    (request,) = provider_server.requests("dashscope.generation")
    parameters = request.body["parameters"]
    assert parameters["result_format"] == "message"
    assert parameters["response_format"] == {"type": "json_object"}
    assert request.body["input"]["messages"][-1]["content"].endswith("年假咋算")


@pytest.mark.parametrize(
    "answer",
    [
        "员工的年假天数如何计算",
        '["员工的年假天数如何计算"]',
        '{"query": "员工的年假天数如何计算"}',
        '{"rewrite": ""}',
        '{"rewrite": "年假咋算？"}',
        '{"rewrite": "' + "年假" * 60 + '"}',
    ],
    ids=["not-json", "not-object", "no-rewrite-key", "empty", "identical", "too-long"],
)
def test_invalid_rewrites_are_bad_responses(provider_server, connection, answer):
    # given
    provider_server.enqueue("dashscope.generation", Answer(answer))
    rewriter = DashScopeRewriter(connection=connection)

    # when / then
    with pytest.raises(ProviderBadResponse):
        rewriter.rewrite("年假咋算")


def test_a_rewrite_that_loses_a_number_or_product_name_is_rejected(provider_server, connection):
    # given
    provider_server.enqueue("dashscope.generation", Answer('{"rewrite": "如何导出考勤报表"}'))
    rewriter = DashScopeRewriter(connection=connection)

    # when / then
    with pytest.raises(ProviderBadResponse):
        rewriter.rewrite("ERP 2024 版怎么导出考勤")


# --- chat ---------------------------------------------------------------------------------------


def test_chat_streams_incremental_deltas_in_order(provider_server, connection):
    # given
    deltas = ("年假", "按工龄", "计算，", "满一年", "5天。")
    provider_server.enqueue("dashscope.generation", Answer(deltas=deltas))
    chat = DashScopeChatModel(model="qwen-plus", connection=connection)

    # when
    received = list(chat.stream(QUESTION, max_tokens=300, temperature=0.3))

    # then
    assert received == list(deltas)
    (request,) = provider_server.requests("dashscope.generation")
    assert request.headers["X-DashScope-SSE"] == "enable"
    parameters = request.body["parameters"]
    assert parameters["incremental_output"] is True
    assert parameters["result_format"] == "message"
    assert parameters["max_tokens"] == 300
    assert request.body["input"]["messages"] == [
        {"role": "system", "content": "你是企业知识库助手。"},
        {"role": "user", "content": "年假有几天？"},
    ]


def test_nothing_is_sent_before_the_stream_is_read(provider_server, connection):
    # given
    chat = DashScopeChatModel(connection=connection)

    # when
    stream = chat.stream(QUESTION)
    stream.close()

    # then
    assert provider_server.requests() == []


def test_closing_a_stream_early_stops_reading(provider_server, connection):
    # given
    provider_server.enqueue(
        "dashscope.generation", Answer(deltas=tuple(f"第{i}段" for i in range(200)), delay=0.01)
    )
    stream = DashScopeChatModel(connection=connection).stream(QUESTION)

    # when
    first_two = [next(stream), next(stream)]
    stream.close()

    # then
    assert first_two == ["第0段", "第1段"]
    assert_stream_abandoned(provider_server)


def test_opening_a_stream_is_retried_on_429(provider_server, connection):
    # given
    provider_server.enqueue("dashscope.generation", Fail(429, "Throttling"), Answer("好的。"))
    chat = DashScopeChatModel(connection=connection)

    # when
    text = "".join(chat.stream(QUESTION))

    # then
    assert text == "好的。"
    assert len(provider_server.requests()) == 2


def test_an_error_mid_stream_is_raised_after_the_deltas_already_sent(provider_server, connection):
    # given
    provider_server.enqueue(
        "dashscope.generation", Answer(deltas=("一", "二", "三", "四"), error_after=2)
    )
    received = []

    # when
    with pytest.raises(ProviderError):
        for delta in DashScopeChatModel(connection=connection).stream(QUESTION):
            received.append(delta)

    # then
    assert received == ["一", "二"]
    assert len(provider_server.requests()) == 1


def test_a_stream_that_ends_without_finishing_is_a_bad_response(provider_server, connection):
    # given
    provider_server.enqueue("dashscope.generation", Answer(deltas=("一", "二"), finish=False))

    # when / then
    with pytest.raises(ProviderBadResponse):
        list(DashScopeChatModel(connection=connection).stream(QUESTION))


def test_complete_returns_the_whole_answer(provider_server, connection):
    # given
    provider_server.enqueue("dashscope.generation", Answer("年假为每年5天。"))

    # when
    text = DashScopeChatModel(connection=connection).complete(QUESTION)

    # then
    assert text == "年假为每年5天。"
    (request,) = provider_server.requests()
    assert "X-DashScope-SSE" not in request.headers


# --- captions -----------------------------------------------------------------------------------


def test_caption_sends_the_image_inline_with_context(provider_server, connection):
    # given
    provider_server.enqueue("dashscope.multimodal", Answer("一张报销审批流程图。"))
    captioner = DashScopeCaptioner(model="qwen-vl-plus", connection=connection)

    # when
    caption = captioner.caption(
        image_jpeg=b"\xff\xd8\xff\xe0fake", context="报销流程如下图所示", ocr_text="提交 审批"
    )

    # then
    assert caption == "图片：一张报销审批流程图。"
    (request,) = provider_server.requests("dashscope.multimodal")
    image, text = request.body["input"]["messages"][0]["content"]
    assert image["image"].startswith("data:image/jpeg;base64,/9j/")
    assert "报销流程如下图所示" in text["text"] and "提交 审批" in text["text"]
    assert "X-DashScope-OssResourceResolve" not in request.headers


def test_an_image_over_the_inline_limit_is_refused(provider_server, connection):
    # given
    captioner = DashScopeCaptioner(connection=connection)

    # when / then
    with pytest.raises(ProviderInputTooLarge):
        captioner.caption(image_jpeg=b"\xff" * (8 * 1024 * 1024), context="")
    assert provider_server.requests() == []
