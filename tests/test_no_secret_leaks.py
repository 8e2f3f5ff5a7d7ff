"""No secret in logs, traces, errors or pages.

Fake secrets go into the environment and the settings read from it (model provider keys, the
Django secret key, the database password, object storage and Milvus credentials). Then the API,
the chat transports (in process and on daphne), provider failures that echo the key back (as
real providers do: "Incorrect API key provided: sk-…"), bad requests, 404s, a 500 with DEBUG on
and off, and every admin page run, while everything is captured: every log record of every
logger at DEBUG (the SDKs' included), the output of the daphne process, every response body and
header, and every stored trace, message and task row. No secret may appear anywhere in it.
"""

from __future__ import annotations

import json
import logging
import secrets
import uuid

import httpx
import pytest
from django.contrib import admin
from django.core import serializers
from django.db import connection
from django.test import Client
from django.urls import URLResolver, get_resolver, reverse
from websockets.sync.client import connect

from chat.models import ChatEvidence, Conversation, Message, QueryTrace
from tests.chat.conftest import (  # noqa: F401  (fixtures)
    FAQ_QUESTION,
    RAG_QUESTION,
    chat_kb,
    csrf_pair,
    live_chat_server,
    session_cookie_for,
    ws_url,
)
from tests.fakes.provider_server import Answer, Fail, Reply

pytestmark = pytest.mark.django_db(transaction=True)


def _secret(name: str) -> str:
    return f"{name}-LEAKCHECK-{secrets.token_hex(12)}"


@pytest.fixture
def fake_secrets(monkeypatch, settings):
    """Every secret the deployment reads, set in the environment and in the settings."""
    values = {
        "OPENAI_API_KEY": _secret("sk-openai"),
        "DASHSCOPE_API_KEY": _secret("sk-dashscope"),
        "DJANGO_SECRET_KEY": _secret("django"),
        "DB_PASSWORD": _secret("dbpass"),
        "AWS_SECRET_ACCESS_KEY": _secret("aws"),
        "MILVUS_TOKEN": _secret("milvus"),
        "REDIS_PASSWORD": _secret("redis"),
    }
    monkeypatch.setenv("OPENAI_API_KEY", values["OPENAI_API_KEY"])
    monkeypatch.setenv("DASHSCOPE_API_KEY", values["DASHSCOPE_API_KEY"])
    monkeypatch.setenv("DJANGO_SECRET_KEY", values["DJANGO_SECRET_KEY"])
    monkeypatch.setenv("DATABASE_URL", f"postgres://ragsite:{values['DB_PASSWORD']}@127.0.0.1:5432/ragsite")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", values["AWS_SECRET_ACCESS_KEY"])
    monkeypatch.setenv("MILVUS_TOKEN", values["MILVUS_TOKEN"])
    settings.OPENAI_API_KEY = values["OPENAI_API_KEY"]
    settings.DASHSCOPE_API_KEY = values["DASHSCOPE_API_KEY"]
    settings.SECRET_KEY = values["DJANGO_SECRET_KEY"]
    settings.AWS_SECRET_ACCESS_KEY = values["AWS_SECRET_ACCESS_KEY"]
    # Read at start-up only (the cache and channel layer keep the test's own configuration).
    monkeypatch.setenv("REDIS_URL", f"redis://:{values['REDIS_PASSWORD']}@127.0.0.1:6379/0")
    settings.REDIS_URL = f"redis://:{values['REDIS_PASSWORD']}@127.0.0.1:6379/0"
    # The password of the live connection too (ignored by SQLite and by PostgreSQL's trust auth),
    # so anything that prints the connection's settings would print it.
    previous_password = connection.settings_dict.get("PASSWORD")
    connection.settings_dict["PASSWORD"] = values["DB_PASSWORD"]
    yield values
    connection.settings_dict["PASSWORD"] = previous_password


@pytest.fixture
def every_log_record(caplog):
    """caplog at DEBUG on every logger, including those configured quieter."""
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)]
    previous = [(logger, logger.level) for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
    caplog.set_level(logging.DEBUG)
    yield caplog
    for logger, level in previous:
        logger.setLevel(level)


class Evidence:
    """Everything the test saw, as text."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []

    def response(self, label: str, response) -> None:
        body = response.content if hasattr(response, "content") and not getattr(response, "streaming", False) else b""
        if getattr(response, "streaming", False):
            body = b"".join(response.streaming_content)
        headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
        self.texts.append((label, f"{response.status_code}\n{headers}\n{body.decode('utf-8', 'replace')}"))

    def text(self, label: str, text: str) -> None:
        self.texts.append((label, text))

    def leaks(self, values: dict[str, str]) -> list[tuple[str, str, str]]:
        found = []
        for label, text in self.texts:
            for name, value in values.items():
                if value in text:
                    index = text.index(value)
                    found.append((name, label, text[max(0, index - 200): index + 60]))
        return found


def use_openai(settings, server, key: str) -> None:
    from engines.providers import clear_provider_cache

    settings.RAG_PROVIDER = "openai"
    settings.OPENAI_BASE_URL = server.openai_base_url
    settings.OPENAI_API_KEY = key
    settings.RAG_CHAT_MODEL = "fake-chat"
    settings.RAG_REWRITE_MODEL = "fake-chat"
    settings.RAG_RERANK_MODEL = "fake-rerank"
    settings.RAG_PROVIDER_MAX_RETRIES = 0
    settings.RAG_PROVIDER_TIMEOUT_SECONDS = 5.0
    clear_provider_cache()


def use_dashscope(settings, server, key: str) -> None:
    from engines.providers import clear_provider_cache

    settings.RAG_PROVIDER = "dashscope"
    settings.DASHSCOPE_BASE_URL = server.dashscope_base_url
    settings.DASHSCOPE_API_KEY = key
    settings.RAG_CHAT_MODEL = "qwen-fake"
    settings.RAG_REWRITE_MODEL = "qwen-fake"
    settings.RAG_RERANK_MODEL = "gte-rerank-fake"
    settings.RAG_PROVIDER_MAX_RETRIES = 0
    settings.RAG_PROVIDER_TIMEOUT_SECONDS = 5.0
    clear_provider_cache()


def echoing_failures(key: str) -> list:
    """Provider errors whose bodies quote the key, the way real providers quote what they got."""
    return [
        Fail(401, code="invalid_api_key", message=f"Incorrect API key provided: {key}"),
        Reply(status=400, json_body={"error": {"message": f"bad request from Bearer {key}", "code": key}}),
        Fail(500, code="InternalError", message=f"upstream failed for {key}"),
    ]


def admin_pages(kb) -> list[str]:
    """Every admin changelist and first change page, and every admin URL without parameters."""
    pages = ["/admin/"]
    for model in admin.site._registry:
        info = model._meta.app_label, model._meta.model_name
        pages.append(reverse("admin:%s_%s_changelist" % info))
        first = model._default_manager.first()
        if first is not None:
            pages.append(reverse("admin:%s_%s_change" % info, args=[first.pk]))
    admin_resolver = next(p for p in get_resolver().url_patterns if isinstance(p, URLResolver) and str(p.pattern) == "admin/")

    def walk(patterns, prefix):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            else:
                yield prefix + str(pattern.pattern)

    for route in walk(admin_resolver.url_patterns, "admin/"):
        route = route.replace("^", "").replace("$", "")
        if "<" not in route and "(" not in route and "logout" not in route:
            pages.append("/" + route)
    pages.append(f"/admin/knowledge/knowledgebase/{kb.pk}/hit-test/")
    return sorted(set(pages))


def test_no_secret_reaches_a_response_a_log_line_a_trace_or_a_page(
    chat_kb, provider_server, fake_secrets, every_log_record, settings, staff_user, member_user, capfd
):
    seen = Evidence()
    key = fake_secrets["OPENAI_API_KEY"]
    member = Client()
    member.force_login(member_user)
    anonymous = Client()
    rag = {"knowledge_base_id": chat_kb.slug, "question": RAG_QUESTION}
    costly = {**rag, "enable_query_rewrite": True, "enable_rerank": True}

    # --- the OpenAI-compatible provider: success, then failures that echo the key ------------------
    use_openai(settings, provider_server, key)
    seen.response("explain ok", member.post("/api/retrieval/explain", costly, content_type="application/json"))
    seen.response("chat ok", member.post("/api/chat", costly, content_type="application/json"))
    for failure in echoing_failures(key):
        provider_server.enqueue("openai.rerank", failure)
        provider_server.enqueue("openai.chat", failure)  # the rewrite
        seen.response(f"explain {failure}", member.post("/api/retrieval/explain", costly, content_type="application/json"))
        provider_server.enqueue("openai.chat", failure, failure)
        seen.response(f"chat {failure}", member.post("/api/chat", costly, content_type="application/json"))
    provider_server.enqueue("openai.chat", Answer(text="星河X3 的保修期为 24 个月。", error_after=2))
    seen.response("chat broken stream", member.post("/api/chat", {**rag, "enable_query_rewrite": False}, content_type="application/json"))

    # --- DashScope: the same, through its own SDK -----------------------------------------------------
    use_dashscope(settings, provider_server, fake_secrets["DASHSCOPE_API_KEY"])
    seen.response("dashscope chat ok", member.post("/api/chat", costly, content_type="application/json"))
    for failure in echoing_failures(fake_secrets["DASHSCOPE_API_KEY"]):
        provider_server.enqueue("dashscope.rerank", failure)
        provider_server.enqueue("dashscope.generation", failure, failure, failure)
        seen.response(f"dashscope chat {failure}", member.post("/api/chat", costly, content_type="application/json"))
    assert provider_server.requests("dashscope.generation") and provider_server.requests("openai.rerank")

    # --- bad requests, 404s, refusals ------------------------------------------------------------------
    for label, response in [
        ("invalid json", anonymous.post("/api/chat/stream", "{nope", content_type="application/json")),
        ("invalid body", anonymous.post("/api/retrieval/search", {"question": ""}, content_type="application/json")),
        ("unknown kb", anonymous.post("/api/chat", {**rag, "knowledge_base_id": "nope"}, content_type="application/json")),
        ("unknown url", anonymous.get("/api/nowhere")),
        ("unknown conversation", member.get(f"/api/chat/conversations/{uuid.uuid4()}")),
        ("bad token", Client().post("/api/chat", rag, content_type="application/json", headers={"Authorization": "Token nope"})),
        ("costly anonymous", anonymous.post("/api/retrieval/search", costly, content_type="application/json")),
        ("csrf", _csrf_refusal(member_user, rag)),
    ]:
        seen.response(label, response)

    # --- a 500, with DEBUG off and on (the technical page lists settings and frame locals) ------------
    for provider, use, provider_key in (("openai", use_openai, key),
                                        ("dashscope", use_dashscope, fake_secrets["DASHSCOPE_API_KEY"])):
        use(settings, provider_server, provider_key)
        for debug in (False, True):
            settings.DEBUG = debug
            seen.response(f"500 {provider} debug={debug}", _server_error(member, costly, provider=provider))
    settings.DEBUG = False
    use_openai(settings, provider_server, key)

    # --- SSE and WebSocket on daphne (its log output is captured from the process's stderr) ------------
    provider_server.enqueue("openai.chat", Fail(401, code="invalid_api_key", message=f"Incorrect API key provided: {key}"))
    cookies, csrf = csrf_pair()
    with live_chat_server() as base_url:
        with httpx.Client(base_url=base_url, cookies={**session_cookie_for(member_user), **cookies}, timeout=60) as client:
            for body in ({**rag, "enable_query_rewrite": False}, costly, {**rag, "question": FAQ_QUESTION}):
                response = client.post("/api/chat/stream", json=body, headers=csrf)
                seen.text(f"sse {body}", f"{response.status_code}\n{response.headers}\n{response.text}")
        with connect(ws_url(base_url), origin=base_url, proxy=None, open_timeout=30) as socket:
            provider_server.enqueue("openai.chat", Fail(500, message=f"upstream failed for {key}"))
            socket.send(json.dumps({"type": "question", **rag, "enable_query_rewrite": False}))
            frames = []
            while not frames or json.loads(frames[-1])["type"] not in ("end", "error"):
                frames.append(socket.recv(timeout=60))
            seen.text("websocket", "\n".join(frames))

    # --- admin pages (traces, settings-like pages), the chat page, the API schema -------------------------
    staff = Client()
    staff.force_login(staff_user)
    for page in admin_pages(chat_kb) + ["/", "/api/schema/", "/api/docs/"]:
        seen.response(f"GET {page}", staff.get(page))
    seen.response("hit test", staff.post(f"/admin/knowledge/knowledgebase/{chat_kb.pk}/hit-test/",
                                         {"question": RAG_QUESTION, "top_k": 5, "mode": "hybrid", "candidate_k": 30,
                                          "enable_rerank": "on", "enable_query_rewrite": "on"}))

    # --- what was stored ------------------------------------------------------------------------------------
    from django_tasks_db.models import DBTaskResult

    for model in (QueryTrace, Message, Conversation, ChatEvidence, DBTaskResult):
        seen.text(f"rows of {model.__name__}", serializers.serialize("json", model.objects.all()))
    assert QueryTrace.objects.filter(error_code__gt="").exists() or QueryTrace.objects.exclude(degradations=[]).exists()

    # --- and every log line ---------------------------------------------------------------------------------
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    for record in every_log_record.records:
        seen.text(f"log {record.name}", formatter.format(record))
    out, err = capfd.readouterr()
    seen.text("process output", out + err)
    assert any(r.name.startswith(("openai", "httpx", "dashscope")) and r.levelno == logging.DEBUG
               for r in every_log_record.records), "the SDKs' DEBUG records were not captured"
    assert "daphne" in err

    # then
    leaks = seen.leaks(fake_secrets)
    assert leaks == [], "\n\n".join(f"{name} in {label}: …{context}…" for name, label, context in leaks)


def _csrf_refusal(user, body):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client.post("/api/chat/stream", body, content_type="application/json")


def _server_error(client: Client, body: dict, *, provider: str):
    """A 500 from deep inside a provider call: the SDK's HTTP transport raising what no adapter
    expects, so the traceback (and the DEBUG page's frame locals) runs through the adapter and
    the SDK while they hold the request and its Authorization header."""
    import httpx2
    import requests

    from engines.providers import clear_provider_cache

    def broken(self, *args, **kwargs):
        raise RuntimeError("unexpected failure inside the SDK")

    clear_provider_cache()
    owner, name = (httpx2.Client, "send") if provider == "openai" else (requests.Session, "send")
    original = getattr(owner, name)
    setattr(owner, name, broken)
    try:
        raising = Client(raise_request_exception=False)
        raising.cookies = client.cookies
        response = raising.post("/api/retrieval/explain", body, content_type="application/json")
    finally:
        setattr(owner, name, original)
    assert response.status_code == 500, response.content[:300]
    return response


def test_the_debug_page_redacts_secrets_in_frame_variables_settings_and_messages(settings, rf):
    # given: a failure in a frame that holds the key in a header, with a password in a URL setting
    from django.views.debug import technical_500_response

    key = _secret("sk-openai")
    redis_password = _secret("redis")
    settings.DEBUG = True
    settings.OPENAI_API_KEY = key
    settings.REDIS_URL = f"redis://:{redis_password}@cache.internal:6379/0"
    settings.SOME_ENDPOINT = f"https://svc:{redis_password}x@example.com/path"

    def call_provider():
        headers = {"Authorization": f"Bearer {key}"}  # noqa: F841  (a frame local, as in an SDK)
        raise RuntimeError(f"provider said: Incorrect API key provided: {key}")

    try:
        call_provider()
    except RuntimeError:
        import sys

        # when
        page = technical_500_response(rf.get("/api/chat"), *sys.exc_info()).content.decode()
    # then
    assert key not in page and redis_password not in page
    assert "Bearer ********************" in page
    assert "redis://:********************@cache.internal:6379/0" in page
    assert "https://svc:********************@example.com/path" in page
