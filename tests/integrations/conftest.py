"""Fixtures of the integration transports' tests, named by the state they put the world in.

- the chat tests' public knowledge base (`chat_kb`, built through real ingestion; see
  tests/chat/conftest.py, whose `live_chat_server` the tests start daphne with);
- `member_token` / `engineer_token`: the API tokens (`rest_framework.authtoken`) of a signed-in
  member and of a member of the `engineers` group, as an OpenAI client sends them;
- `hidden_kb`: a knowledge base only the `engineers` group may read (no documents: nobody else
  gets as far as its content);
- `openai_client(base_url, token)` / `async_openai_client(...)`: the stock `openai` SDK pointed
  at a live server's `/v1`, without retries (a test sees each status as the server sent it).
"""

from __future__ import annotations

import openai
import pytest
from rest_framework.authtoken.models import Token

from knowledge.models import KnowledgeBase, Visibility
from tests.chat.conftest import chat_kb
from tests.conftest import make_kb

# The chat tests' fixtures this package uses, made visible to its tests.
__all__ = ["chat_kb"]


@pytest.fixture
def member_token(member_user) -> str:
    return Token.objects.create(user=member_user).key


@pytest.fixture
def engineer_token(engineer_user) -> str:
    return Token.objects.create(user=engineer_user).key


@pytest.fixture
def hidden_kb(db, engineers_group, staff_user) -> KnowledgeBase:
    return make_kb(slug="engineering", visibility=Visibility.RESTRICTED, groups=[engineers_group], actor=staff_user)


def openai_client(base_url: str, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=token, max_retries=0, timeout=60)


def async_openai_client(base_url: str, token: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=token, max_retries=0, timeout=60)
