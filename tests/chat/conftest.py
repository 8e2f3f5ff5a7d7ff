"""Shared fixtures for the chat tests, named by the state they put the world in.

- `chat_kb` (public), `internal_chat_kb`, `restricted_chat_kb` (group `engineers`): a published
  knowledge base built through the real ingestion pipeline (upload → parse → chunk → embed →
  Milvus Lite, the local provider) from `DOCUMENTS`, plus the FAQs in `FAQS`. Tests using them
  must be transactional (`pytest.mark.django_db(transaction=True)`): the ingestion tasks run
  after commit, and a daphne server in another process must see the rows.
- `provider_server` (the fake model provider) and `openai_provider` (tests/conftest.py: settings pointing the
  whole app at it as an OpenAI-compatible provider: chat, rewrite, rerank).
- `live_chat_server()`: daphne in a child process on the test database. Start it inside the
  test, after every settings change: the child is forked then and inherits them.
- Clients for the transports: `post_stream` / `sse_parts` (SSE over httpx), `session_cookie_for`
  and `csrf_pair` (a signed-in browser), `ws_url`.

The questions the fixtures answer: `FAQ_QUESTION` (FAQ exact), `FAQ_NEAR_QUESTION` (FAQ by
similarity), `RAG_QUESTION` (documents), `OFF_TOPIC_QUESTION` (insufficient context),
`GREETING` (direct answer).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile

from knowledge.documents import services as document_services
from knowledge.faqs import services as faq_services
from knowledge.models import KnowledgeBase, Visibility
from tests.conftest import make_kb, publish_draft  # noqa: F401  (publish_draft: the chat tests' import point)
from tests.fakes.provider_server import FakeProviderServer
from tests.live import daphne_server, session_cookie_for  # noqa: F401  (the chat tests' import point)

HANDBOOK = """# 员工手册

## 年假

入职满一年的员工每年享有 15 天带薪年假，年假需提前三个工作日在 OA 系统申请。

## 差旅住宿标准

| 城市级别 | 住宿标准 |
| --- | --- |
| 一线城市 | 600元/晚 |
| 其他城市 | 400元/晚 |
"""

PRODUCTS = """# 产品手册

## 星河X3

星河X3 是一款 Wi-Fi 6 路由器，推荐覆盖面积 120 平方米。星河X3 的保修期为 24 个月，保修期内免费更换。

## 星河X5

星河X5 是一款 Wi-Fi 7 路由器，推荐覆盖面积 200 平方米，保修期为 36 个月。
"""

IT_GUIDE = """# IT 服务台指南

## VPN

首次使用请安装 VPN 客户端，并使用公司邮箱账号登录。VPN 空闲 30 分钟后会自动断开。

## 密码

域账号密码每 90 天需要修改一次，新密码不能与最近 5 次使用过的密码相同。
"""

DOCUMENTS = {"员工手册.md": HANDBOOK, "产品手册.md": PRODUCTS, "IT 服务台指南.md": IT_GUIDE}

FAQ_QUESTION = "年假有多少天？"
FAQ_ANSWER = "入职满一年的员工每年享有 15 天带薪年假，需提前三个工作日在 OA 系统申请。"
FAQS = [
    {"question": FAQ_QUESTION, "answer": FAQ_ANSWER, "similar_questions": ["年假几天", "每年有几天年假"]},
    {"question": "如何申请报销？", "answer": "在 OA 系统提交报销单，附上发票，由部门负责人审批。"},
]

GREETING = "你好"
FAQ_NEAR_QUESTION = "请问年假有多少天"
RAG_QUESTION = "星河X3 的保修期是多久？"
RAG_ANSWER_FACT = "24 个月"
OFF_TOPIC_QUESTION = "今天北京天气怎么样？"

GENERATION_FAILED_TEXT = "回答生成失败，请稍后重试。"


# --- knowledge bases ----------------------------------------------------------------------------


def publish_kb(
    *,
    actor,
    visibility: str = Visibility.PUBLIC,
    groups=(),
    documents: dict[str, str] | None = None,
    faqs: list[dict[str, Any]] | None = None,
    slug: str | None = None,
) -> KnowledgeBase:
    """A knowledge base whose documents went through real ingestion and whose version is active.

    Needs the `milvus`, `run_tasks` and `media_root` fixtures active (and a transactional test).
    """
    kb = make_kb(slug=slug, visibility=visibility, groups=groups, actor=actor)
    for faq in FAQS if faqs is None else faqs:
        faq_services.save_faq(kb=kb, actor=actor, **faq)
    uploads = [SimpleUploadedFile(name, text.encode()) for name, text in (documents or DOCUMENTS).items()]
    document_services.upload_documents(kb=kb, actor=actor, files=uploads)
    return publish_draft(kb, actor=actor)


@pytest.fixture
def chat_kb(milvus, run_tasks, media_root, staff_user) -> KnowledgeBase:
    """Public: anonymous readers may ask it."""
    return publish_kb(actor=staff_user, visibility=Visibility.PUBLIC)


@pytest.fixture
def internal_chat_kb(milvus, run_tasks, media_root, staff_user) -> KnowledgeBase:
    """Internal: any signed-in user may ask it, anonymous clients may not."""
    return publish_kb(actor=staff_user, visibility=Visibility.INTERNAL)


@pytest.fixture
def restricted_chat_kb(milvus, run_tasks, media_root, staff_user, engineers_group) -> KnowledgeBase:
    """Restricted to the `engineers` group (see `engineer_user`)."""
    return publish_kb(actor=staff_user, visibility=Visibility.RESTRICTED, groups=[engineers_group])


# --- model provider -----------------------------------------------------------------------------


def streamed_chat_requests(server: FakeProviderServer) -> list:
    """The generation calls (streamed chat completions) the fake provider received."""
    return [r for r in server.requests("openai.chat") if isinstance(r.body, dict) and r.body.get("stream") is True]


# --- a live server and its clients --------------------------------------------------------------


@contextmanager
def live_chat_server() -> Iterator[str]:
    """daphne on the test database; yields its base URL (http://127.0.0.1:PORT).

    Cached Milvus clients (gRPC channels) and provider adapters are dropped first: a forked
    child must open its own, and picks up the current settings when it does.
    """
    from engines.milvus_store import reset_vector_store_cache
    from engines.providers import clear_provider_cache

    reset_vector_store_cache()
    clear_provider_cache()
    with daphne_server() as base_url:
        yield base_url


def ws_url(base_url: str) -> str:
    return base_url.replace("http://", "ws://", 1) + "/ws/chat/"


def csrf_pair() -> tuple[dict[str, str], dict[str, str]]:
    """(cookie, header) of a CSRF token, as a browser page sends them."""
    token = secrets.token_hex(16)  # 32 characters: an unmasked secret, accepted in both places
    return {django_settings.CSRF_COOKIE_NAME: token}, {"X-CSRFToken": token}


def parse_sse(lines) -> list[dict[str, Any] | str]:
    """`data:` payloads of an SSE body: parsed JSON parts, and the literal "[DONE]"."""
    parts: list[dict[str, Any] | str] = []
    for line in lines:
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        parts.append(payload if payload == "[DONE]" else json.loads(payload))
    return parts


def post_stream(
    base_url: str,
    body: dict[str, Any],
    *,
    cookies: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> tuple[httpx.Response, list[dict[str, Any] | str]]:
    """POST /api/chat/stream and read the whole answer: (response, parts). The response body of
    an error before the stream (JSON) is left readable as `response.json()`."""
    with httpx.Client(base_url=base_url, cookies=cookies, timeout=httpx.Timeout(timeout)) as client:
        with client.stream("POST", "/api/chat/stream", json=body, headers=headers) as response:
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                parts = parse_sse(response.iter_lines())
            else:
                response.read()
                parts = []
    return response, parts


def of_type(parts, kind: str) -> list[dict[str, Any]]:
    return [p for p in parts if isinstance(p, dict) and p.get("type") == kind]


def text_of(parts) -> str:
    return "".join(p["delta"] for p in of_type(parts, "text-delta"))
