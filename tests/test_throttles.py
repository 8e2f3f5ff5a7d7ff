"""Rate limits of chat and retrieval (ragsite.throttles): per user, per client IP, behind proxies,
the 429 shape, atomic counting on the real cache backends, rates from the environment.

The SSE and WebSocket transports are covered against daphne in tests/chat/test_limits.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.cache import cache
from django.http.request import HttpHeaders

from ragsite.throttles import SCOPES, ChatAnonThrottle, RetrievalUserThrottle
from tests.conftest import REDIS_URL, api_client_for

ROOT = Path(__file__).resolve().parent.parent
UNKNOWN_KB = {"knowledge_base_id": "no-such-kb", "question": "年假有几天？"}


@pytest.fixture
def throttle_rates(settings):
    """Switch the throttles on with these rates (the test settings leave them off)."""

    def set_rates(num_proxies: int = 0, **rates: str) -> None:
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {scope: rates.get(scope) for scope in SCOPES},
            "NUM_PROXIES": num_proxies,
        }

    return set_rates


def post(client, path: str, body=None, **extra):
    return client.post(path, body or UNKNOWN_KB, format="json", **extra)


# --- per user ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_signed_in_user_gets_429_past_the_rate_and_others_do_not(
    throttle_rates, milvus, run_tasks, media_root, staff_user, member_user, engineer_user
):
    # given: a published knowledge base and 3 retrievals a minute per user
    from tests.chat.conftest import publish_kb

    kb = publish_kb(actor=staff_user)
    throttle_rates(retrieval_user="3/min")
    member, engineer = api_client_for(member_user), api_client_for(engineer_user)
    body = {"knowledge_base_id": kb.slug, "question": "星河X3 的保修期是多久？"}
    # when
    served = [post(member, "/api/retrieval/search", body).status_code for _ in range(3)]
    refused = post(member, "/api/retrieval/explain", body)
    other_user = post(engineer, "/api/retrieval/search", body)
    # then: the same error shape as every API error, with when to come back
    assert served == [200, 200, 200]
    assert refused.status_code == 429
    payload = refused.json()
    assert payload["code"] == "throttled"
    assert "请求过于频繁" in payload["detail"]
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert payload["retry_after"] == int(refused["Retry-After"])
    assert other_user.status_code == 200


@pytest.mark.django_db
def test_chat_and_retrieval_have_budgets_of_their_own(throttle_rates, member_api):
    # given
    throttle_rates(chat_user="2/min", retrieval_user="2/min")
    # when: requests that end in 404 still count (the limit comes before any work)
    chats = [post(member_api, "/api/chat").status_code for _ in range(3)]
    retrievals = [post(member_api, "/api/retrieval/search").status_code for _ in range(3)]
    # then
    assert chats == [404, 404, 429]
    assert retrievals == [404, 404, 429]


@pytest.mark.django_db
def test_the_refusal_is_translated(throttle_rates, member_api):
    # given
    throttle_rates(retrieval_user="1/min")
    post(member_api, "/api/retrieval/search")
    # when
    refused = post(member_api, "/api/retrieval/search", HTTP_ACCEPT_LANGUAGE="en")
    # then
    assert refused.status_code == 429
    assert refused.json()["detail"].startswith("Too many requests")


# --- per client IP ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_anonymous_callers_count_per_ip_whatever_x_forwarded_for_they_send(throttle_rates, anonymous_api):
    # given: no proxy configured (the default)
    throttle_rates(retrieval_anon_ip="2/min")
    # when: a client forges a fresh X-Forwarded-For on every request
    forged = [
        post(anonymous_api, "/api/retrieval/search", REMOTE_ADDR="203.0.113.5", HTTP_X_FORWARDED_FOR=f"10.9.9.{n}").status_code
        for n in range(3)
    ]
    another_address = post(anonymous_api, "/api/retrieval/search", REMOTE_ADDR="203.0.113.6")
    # then
    assert forged == [404, 404, 429]
    assert another_address.status_code == 404


@pytest.mark.django_db
def test_behind_configured_proxies_the_address_they_forward_counts(throttle_rates, anonymous_api):
    # given: one proxy in front, which appends the address it saw to X-Forwarded-For
    throttle_rates(num_proxies=1, retrieval_anon_ip="2/min")
    via_proxy = {"REMOTE_ADDR": "10.0.0.1"}
    # when: the client prepends forged hops; the proxy's own entry is the last one
    first = [
        post(anonymous_api, "/api/retrieval/search", HTTP_X_FORWARDED_FOR=f"1.2.3.{n}, 198.51.100.7", **via_proxy).status_code
        for n in range(3)
    ]
    second_client = post(anonymous_api, "/api/retrieval/search", HTTP_X_FORWARDED_FOR="198.51.100.8", **via_proxy)
    # then
    assert first == [404, 404, 429]
    assert second_client.status_code == 404


@pytest.mark.django_db
def test_user_and_anonymous_scopes_do_not_mix(throttle_rates, member_api, anonymous_api):
    # given: anonymous callers may not retrieve at all, signed-in ones freely
    throttle_rates(retrieval_anon_ip="1/min")
    # when
    anonymous = [post(anonymous_api, "/api/retrieval/search").status_code for _ in range(2)]
    signed_in = [post(member_api, "/api/retrieval/search").status_code for _ in range(5)]
    # then
    assert anonymous == [404, 429]
    assert signed_in == [404] * 5


# --- counting ------------------------------------------------------------------------------------


def _caller(user, address="192.0.2.10"):
    meta = {"REMOTE_ADDR": address}
    return SimpleNamespace(user=user, META=meta, headers=HttpHeaders(meta))


def _race(throttle_class, caller, attempts: int) -> int:
    barrier = threading.Barrier(attempts)
    allowed = []

    def attempt():
        throttle = throttle_class()
        barrier.wait()
        allowed.append(throttle.allow_request(caller, None))

    threads = [threading.Thread(target=attempt) for _ in range(attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return sum(allowed)


@pytest.mark.parametrize("backend", ["locmem", "redis"])
def test_concurrent_requests_never_pass_beyond_the_rate(throttle_rates, backend, request):
    # given: DRF's own throttle reads, edits and writes back a log, so N racing requests pass
    # together; these count atomically in the cache
    if backend == "redis":
        request.getfixturevalue("redis_cache")
    throttle_rates(chat_anon_ip="5/min")
    # when
    allowed = _race(ChatAnonThrottle, _caller(AnonymousUser()), attempts=24)
    # then
    assert allowed == 5


def test_a_window_expires_by_itself(throttle_rates, monkeypatch):
    # given: a spent budget
    throttle_rates(retrieval_user="2/s")
    user = SimpleNamespace(is_authenticated=True, pk=41)
    now = [1000.2]
    monkeypatch.setattr(RetrievalUserThrottle, "timer", lambda self: now[0])
    spent = [RetrievalUserThrottle().allow_request(_caller(user), None) for _ in range(3)]
    throttle = RetrievalUserThrottle()
    # when: the next second starts
    refused_wait = (throttle.allow_request(_caller(user), None), throttle.wait())
    now[0] = 1001.05
    # then
    assert spent == [True, True, False]
    assert refused_wait[0] is False and refused_wait[1] == pytest.approx(0.8)
    assert RetrievalUserThrottle().allow_request(_caller(user), None) is True


@pytest.mark.django_db
def test_redis_holds_the_counts(throttle_rates, redis_cache, anonymous_api):
    # given: production's cache
    import redis

    throttle_rates(retrieval_anon_ip="2/min")
    # when
    statuses = [post(anonymous_api, "/api/retrieval/search").status_code for _ in range(3)]
    # then: refused, and the count is in Redis where every web process sees it
    assert statuses == [404, 404, 429]
    keys = [k.decode() for k in redis.Redis.from_url(REDIS_URL).scan_iter(f"{redis_cache}:*throttle:retrieval_anon_ip:*")]
    assert len(keys) == 1 and "127.0.0.1" in keys[0]
    assert cache.get(keys[0].split(":", 2)[2]) == 3


# --- configuration -------------------------------------------------------------------------------


def _settings_probe(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RAG_THROTTLE_", "RAG_NUM_PROXIES"))}
    clean.update(env, DJANGO_SETTINGS_MODULE="ragsite.settings.local")
    code = (
        "import json, django; from django.conf import settings; django.setup(); "
        "print(json.dumps([settings.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'], settings.REST_FRAMEWORK['NUM_PROXIES']]))"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=clean)


def test_rates_and_proxies_come_from_the_environment(tmp_path):
    # when
    probe = _settings_probe(
        RAGSITE_VAR_DIR=str(tmp_path), RAG_THROTTLE_CHAT_USER="7/hour", RAG_THROTTLE_RETRIEVAL_ANON_IP="", RAG_NUM_PROXIES="2"
    )
    # then
    assert probe.returncode == 0, probe.stderr[-2000:]
    rates, proxies = json.loads(probe.stdout.strip().splitlines()[-1])
    assert rates == {"chat_user": "7/hour", "chat_anon_ip": "10/min", "retrieval_user": "60/min", "retrieval_anon_ip": None}
    assert proxies == 2


def test_a_malformed_rate_stops_the_start(tmp_path):
    # when
    probe = _settings_probe(RAGSITE_VAR_DIR=str(tmp_path), RAG_THROTTLE_CHAT_ANON_IP="lots")
    # then
    assert probe.returncode != 0
    assert "chat_anon_ip" in probe.stderr and "30/min" in probe.stderr
