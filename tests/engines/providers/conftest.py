"""Helpers for the provider adapter tests (the fake provider server is the shared
`provider_server` fixture of tests/conftest.py): connection settings pointing at it with fast retries, and checks shared by the DashScope and OpenAI tests."""

from __future__ import annotations

import traceback

from engines.ports import ChatMessage
from engines.providers._common import ConnectionSettings
from tests.fakes.provider_server import FakeProviderServer

# Never a real key: the tests check it reaches the server and nothing else.
FAKE_API_KEY = "sk-test-0123456789abcdef-SECRET"

QUESTION = [ChatMessage("system", "你是企业知识库助手。"), ChatMessage("user", "年假有几天？")]


def fake_connection(base_url: str, *, timeout: float = 2.0) -> ConnectionSettings:
    """Settings for quick tests against `base_url`: the fake key, tiny backoff, short timeout."""
    return ConnectionSettings(
        api_key=FAKE_API_KEY,
        base_url=base_url,
        timeout=timeout,
        max_retries=2,
        retry_base_delay=0.01,
        retry_max_delay=0.05,
    )


def assert_secret_free(exc: BaseException) -> None:
    assert FAKE_API_KEY not in "".join(traceback.format_exception(exc))


def assert_stream_abandoned(server: FakeProviderServer) -> None:
    """The server saw the client hang up long before the last of its deltas was sent."""
    log = server.streams[-1]
    assert log.done.wait(5)
    assert log.aborted
    assert log.sent < 50
