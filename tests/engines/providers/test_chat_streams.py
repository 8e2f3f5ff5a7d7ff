"""Streaming chat through both remote SDKs: a slow first token, one too slow, a stream cut off."""

from __future__ import annotations

import pytest

from engines.ports import ProviderError, ProviderTimeout
from engines.providers.dashscope import DashScopeChatModel
from engines.providers.openai_compat import OpenAIChatModel
from tests.engines.providers.conftest import QUESTION, assert_secret_free, fake_connection
from tests.fakes.provider_server import Answer

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


def test_a_slow_first_token_within_the_timeout_still_streams_every_delta(provider_server, adapter):
    # given: headers at once, the first delta after 0.6 s, the timeout 2 s
    route, build = adapter
    provider_server.enqueue(route, Answer(deltas=("年假", "按工龄", "计算。"), first_delay=0.6))
    # when
    received = list(build().stream(QUESTION))
    # then
    assert received == ["年假", "按工龄", "计算。"]
    assert len(provider_server.requests(route)) == 1


def test_a_first_token_slower_than_the_timeout_is_a_timeout_without_the_key(provider_server, adapter):
    # given: the first delta would come after 3 s, the read timeout is 0.5 s
    route, build = adapter
    provider_server.enqueue(route, Answer(deltas=("迟到",), first_delay=3.0))
    # when
    with pytest.raises(ProviderTimeout) as failure:
        list(build(timeout=0.5).stream(QUESTION))
    # then: reading is not retried once the stream has opened
    assert failure.value.code == "provider_timeout"
    assert len(provider_server.requests(route)) == 1
    assert_secret_free(failure.value)


def test_a_stream_cut_off_midway_raises_after_the_delivered_deltas(provider_server, adapter):
    route, build = adapter
    provider_server.enqueue(route, Answer(deltas=("一", "二", "三", "四"), error_after=2))
    received = []
    with pytest.raises(ProviderError) as failure:
        for delta in build().stream(QUESTION):
            received.append(delta)
    assert received == ["一", "二"]
    assert_secret_free(failure.value)
