"""CSRF on session-authenticated writes: every unsafe API call (resolver-enumerated, the SSE
stream included) made with a signed-in session is refused without the CSRF token (403
`csrf_failed`) and goes through with it; token-authenticated clients need none; and nothing
outside the API opts out of Django's CSRF middleware."""

from __future__ import annotations

import secrets
import uuid

import pytest
from django.conf import settings
from django.test import Client
from django.urls import URLResolver, get_resolver
from rest_framework.authtoken.models import Token
from rest_framework.views import APIView

from chat.views import chat_stream
from knowledge.faqs import services as faq_services
from knowledge.models import Document

UNSAFE = ("post", "put", "patch", "delete")
# Views that are not DRF views but check CSRF themselves (with DRF's session authentication).
SELF_CHECKING = {chat_stream: ("post",)}


def _walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern


def unsafe_api_calls() -> list[tuple[str, str]]:
    """(route, method) of every unsafe method of every API URL."""
    calls = []
    for route, pattern in _walk(get_resolver().url_patterns):
        if not route.startswith("api/"):
            continue
        view = getattr(pattern.callback, "cls", None)
        if pattern.callback in SELF_CHECKING:
            methods = SELF_CHECKING[pattern.callback]
        elif view is not None and issubclass(view, APIView):
            methods = tuple(m for m in UNSAFE if hasattr(view, m))
        else:
            methods = ()
        calls += [(route, method) for method in methods]
    return calls


CALLS = unsafe_api_calls()


@pytest.fixture
def world(kb_with_active_version, staff_user):
    """Ids for every path parameter the API has; a new one must be added here."""
    kb = kb_with_active_version
    faq = faq_services.save_faq(kb=kb, actor=staff_user, question="年假有几天？", answer="15 天。")
    return {
        "kb_id": kb.slug,
        "number": kb.active_version.number,
        "document_id": Document.objects.filter(knowledge_base=kb).first().pk,
        "faq_id": faq.pk,
        "conversation_id": uuid.uuid4(),
        "asset_id": 1,
        "chunk_id": 1,
        "message_id": 1,  # no such answer: the CSRF check comes first, whatever the answer is
    }


def path_of(route: str, world: dict) -> str:
    import re

    def value(match):
        name = match.group(2)
        assert name in world, f"no test value for the path parameter {name!r} of {route}: add it to `world`"
        return str(world[name])

    return "/" + re.sub(r"<(?:(\w+):)?(\w+)>", value, route)


def signed_in_browser(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def call(client: Client, method: str, path: str, **headers):
    return client.generic(method.upper(), path, data="{}", content_type="application/json", headers=headers)


def refused_for_csrf(response) -> bool:
    return response.status_code == 403 and response.json().get("code") == "csrf_failed"


def test_the_walk_sees_the_api_writes():
    # the enumeration itself: the SSE stream and every DRF write method are in it
    assert ("api/chat/stream", "post") in CALLS
    assert ("api/knowledge-bases/", "post") in CALLS
    assert ("api/knowledge-bases/<str:kb_id>/faqs/<int:faq_id>/", "delete") in CALLS
    assert len(CALLS) >= 20


@pytest.mark.django_db(transaction=True)  # the stream admits in a worker thread: committed rows only
@pytest.mark.parametrize("route,method", CALLS, ids=[f"{m.upper()} {r}" for r, m in CALLS])
def test_a_session_write_without_the_csrf_token_is_refused(world, staff_user, route, method):
    # given: a signed-in browser session, and a page that sent no token
    client = signed_in_browser(staff_user)
    path = path_of(route, world)
    # when
    response = call(client, method, path)
    # then
    assert refused_for_csrf(response), (response.status_code, response.content[:300])
    assert "CSRF" in response.json()["detail"]


@pytest.mark.django_db(transaction=True)  # the stream admits in a worker thread: committed rows only
@pytest.mark.parametrize("route,method", CALLS, ids=[f"{m.upper()} {r}" for r, m in CALLS])
def test_a_session_write_with_the_csrf_token_goes_through(world, staff_user, route, method):
    # given: the token of the page's cookie, sent back in the header (as the chat page does)
    client = signed_in_browser(staff_user)
    token = secrets.token_hex(16)
    client.cookies[settings.CSRF_COOKIE_NAME] = token
    # when
    response = call(client, method, path_of(route, world), **{"X-CSRFToken": token})
    # then: whatever the endpoint makes of the empty body, the CSRF check let it through
    assert not refused_for_csrf(response)
    assert response.status_code < 500, response.content[:300]


@pytest.mark.django_db(transaction=True)  # the stream admits in a worker thread: committed rows only
def test_a_session_write_with_the_csrf_token_does_its_work(staff_user):
    # given
    client = signed_in_browser(staff_user)
    token = secrets.token_hex(16)
    client.cookies[settings.CSRF_COOKIE_NAME] = token
    body = {"id": "csrf-ok", "name": "CSRF 测试", "visibility": "internal"}
    # when
    without = client.post("/api/knowledge-bases/", body, content_type="application/json")
    created = client.post("/api/knowledge-bases/", body, content_type="application/json", headers={"X-CSRFToken": token})
    # then
    assert refused_for_csrf(without)
    assert created.status_code == 201, created.content[:300]


@pytest.mark.django_db(transaction=True)  # the stream admits in a worker thread: committed rows only
@pytest.mark.parametrize("route,method", CALLS[:1] + [("api/chat/stream", "post")], ids=["kb-create", "chat-stream"])
def test_token_clients_need_no_csrf_token(world, staff_user, route, method):
    # given: an integration with an API token and no cookies at all
    client = Client(enforce_csrf_checks=True)
    key = Token.objects.create(user=staff_user).key
    # when
    response = call(client, method, path_of(route, world), Authorization=f"Token {key}")
    # then
    assert not refused_for_csrf(response)
    assert response.status_code in (400, 404), response.content[:300]


def test_nothing_outside_the_api_opts_out_of_the_csrf_middleware():
    # given: csrf_exempt is fine on DRF views (session authentication checks) and on views that
    # check themselves; anywhere else it would open a form to other sites
    exempt = [
        route for route, pattern in _walk(get_resolver().url_patterns)
        if getattr(pattern.callback, "csrf_exempt", False)
        and pattern.callback not in SELF_CHECKING
        and not issubclass(getattr(pattern.callback, "cls", object), APIView)
    ]
    # then
    assert exempt == []
