"""Fixtures for the provider adapter tests: a fake provider server and fast retry settings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.provider_server import FakeProviderServer

# Never a real key: the tests check it reaches the server and nothing else.
FAKE_API_KEY = "sk-test-0123456789abcdef-SECRET"


@pytest.fixture
def provider_server() -> Iterator[FakeProviderServer]:
    server = FakeProviderServer().start()
    yield server
    server.stop()


@pytest.fixture
def fast_retries() -> dict[str, float | int]:
    """Adapter keyword arguments for quick tests: tiny backoff, short timeout."""
    return {"timeout": 2.0, "max_retries": 2, "retry_base_delay": 0.01, "retry_max_delay": 0.05}
