"""Streaming chat through both remote SDKs, read in a thread (`stream`) and on the event loop
(`astream`, the SDKs' async clients): the same deltas, the same failures, for each of the four."""

from __future__ import annotations

import asyncio

import pytest
from dashscope.api_entities.aio_session import close_shared_aio_session

from engines.ports import AsyncChatStream, ProviderBadResponse, ProviderError, ProviderTimeout
from engines.providers.dashscope import DashScopeChatModel
from engines.providers.openai_compat import OpenAIChatModel
from tests.engines.providers.conftest import QUESTION, assert_secret_free, assert_stream_abandoned, fake_connection
from tests.fakes.provider_server import Answer, Fail

ADAPTERS = {
    "dashscope": ("dashscope.generation", lambda server, timeout: DashScopeChatModel(
        connection=fake_connection(server.dashscope_base_url, timeout=timeout))),
    "openai": ("openai.chat", lambda server, timeout: OpenAIChatModel(
        model="qwen2.5", connection=fake_connection(server.openai_base_url, timeout=timeout))),
}


@pytest.fixture(params=sorted(ADAPTERS))
def adapter(request, provider_server):
    route, build = ADAPTERS[request.param]
    return route, lambda timeout=2.0: build(provider_server, timeout)


@pytest.fixture(params=["thread", "event-loop"])
def read(request):
    """read(model, received, limit=None): the model's deltas appended to `received` as they
    come, through `stream` or `astream`; with `limit`, the stream is closed after that many."""

    def through_thread(model, received, limit=None):
        stream = model.stream(QUESTION, max_tokens=200, temperature=0.1)
        try:
            for delta in stream:
                received.append(delta)
                if limit is not None and len(received) == limit:
                    break
        finally:
            stream.close()

    async def on_loop(model, received, limit):
        stream = model.astream(QUESTION, max_tokens=200, temperature=0.1)
        try:
            async for delta in stream:
                received.append(delta)
                if limit is not None and len(received) == limit:
                    break
        finally:
            await stream.aclose()
            # The SDK keeps one aiohttp session per event loop; this loop ends with the test.
            await close_shared_aio_session()

    if request.param == "thread":
        return through_thread
    return lambda model, received, limit=None: asyncio.run(on_loop(model, received, limit))


def test_both_remote_models_stream_on_the_event_loop(provider_server, adapter):
    _route, build = adapter
    assert isinstance(build(), AsyncChatStream)


def test_deltas_arrive_in_order_with_the_request_as_asked(provider_server, adapter, read):
    # given
    route, build = adapter
    provider_server.enqueue(route, Answer(deltas=("年假", "按工龄", "计算。")))
    received = []
    # when
    read(build(), received)
    # then
    assert received == ["年假", "按工龄", "计算。"]
    (request,) = provider_server.requests(route)
    # each API's own place for the stream flag and the token budget
    body = request.body
    if route == "openai.chat":
        assert (body["stream"], body["max_tokens"], body["temperature"]) == (True, 200, 0.1)
    else:
        assert request.headers.get("X-DashScope-SSE") == "enable"
        assert (body["parameters"]["max_tokens"], body["parameters"]["incremental_output"]) == (200, True)


def test_a_slow_first_token_within_the_timeout_still_streams_every_delta(provider_server, adapter, read):
    # given: headers at once, the first delta after 0.6 s, the timeout 2 s
    route, build = adapter
    provider_server.enqueue(route, Answer(deltas=("年假", "按工龄", "计算。"), first_delay=0.6))
    received = []
    # when
    read(build(), received)
    # then
    assert received == ["年假", "按工龄", "计算。"]
    assert len(provider_server.requests(route)) == 1


def test_a_first_token_slower_than_the_timeout_is_a_timeout_without_the_key(provider_server, adapter, read):
    # given: the first delta would come after 3 s, the read timeout is 0.5 s
    route, build = adapter
    provider_server.enqueue(route, Answer(deltas=("迟到",), first_delay=3.0))
    # when
    with pytest.raises(ProviderTimeout) as failure:
        read(build(timeout=0.5), [])
    # then: reading is not retried once the stream has opened
    assert failure.value.code == "provider_timeout"
    assert len(provider_server.requests(route)) == 1
    assert_secret_free(failure.value)


def test_a_stream_cut_off_midway_raises_after_the_delivered_deltas(provider_server, adapter, read):
    # given
    route, build = adapter
    provider_server.enqueue(route, Answer(deltas=("一", "二", "三", "四"), error_after=2))
    received = []
    # when
    with pytest.raises(ProviderError) as failure:
        read(build(), received)
    # then
    assert received == ["一", "二"]
    assert_secret_free(failure.value)


def test_opening_a_stream_is_retried_on_a_server_error(provider_server, adapter, read):
    # given
    route, build = adapter
    provider_server.enqueue(route, Fail(500), Answer("好的。"))
    received = []
    # when
    read(build(), received)
    # then
    assert "".join(received) == "好的。"
    assert len(provider_server.requests(route)) == 2


def test_a_stream_that_ends_without_finishing_is_a_bad_response(provider_server, adapter, read):
    # given
    route, build = adapter
    provider_server.enqueue(route, Answer(deltas=("一", "二"), finish=False))
    # when / then
    with pytest.raises(ProviderBadResponse):
        read(build(), [])


def test_closing_a_stream_early_hangs_up_on_the_provider(provider_server, adapter, read):
    # given: 200 deltas, 10 ms apart
    route, build = adapter
    provider_server.enqueue(route, Answer(deltas=tuple(f"第{i}段" for i in range(200)), delay=0.01))
    received = []
    # when
    read(build(), received, limit=2)
    # then
    assert received == ["第0段", "第1段"]
    assert_stream_abandoned(provider_server)
