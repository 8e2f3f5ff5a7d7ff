"""Too busy right now: PostgreSQL out of connections (SQLSTATE 53300 `too_many_connections`) is a
503 `server_busy` with Retry-After on every API path, never a 500.

The live tests run a real daphne whose database role has a CONNECTION LIMIT of its own, and use
that role's connections up from the test: PostgreSQL really refuses the server's connections
(`FATAL: too many connections for role …`), without starving the shared server. The server runs
with its connection pool off, so that each request connects (a pool's open connections would
serve on; a pool with none free is tested in `tests/chat/pipeline/test_connections.py`). For a refused
connect libpq reports no SQLSTATE (psycopg's `sqlstate` is None), only the server's message: the
server-wide limit (`sorry, too many clients already`) and a database's limit are recognised by
theirs, checked with psycopg against a listener that refuses the connection as PostgreSQL does
(lowering the real server's max_connections would starve everything else using it).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import psycopg
import pytest
from django.conf import settings as django_settings
from django.db import OperationalError, connection
from django.db.backends.postgresql.base import DatabaseWrapper
from rest_framework.authtoken.models import Token
from websockets.sync.client import connect

from chat import sse
from chat.views import _stable_message
from ragsite.api import error_payload
from ragsite.errors import is_saturation, server_busy
from retrieval.contracts import FactsUnavailable
from tests.chat.conftest import FAQ_ANSWER, FAQ_QUESTION, RAG_QUESTION, post_stream, text_of, ws_url
from tests.live import daphne_server

ON_POSTGRES = django_settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
postgres_only = pytest.mark.skipif(not ON_POSTGRES, reason="connection limits are PostgreSQL's (set DATABASE_URL)")

ROLE_CONNECTION_LIMIT = 2


# --- PostgreSQL's refusals, as psycopg reports them -----------------------------------------------


@contextmanager
def refusing_listener(message: str) -> Iterator[int]:
    """A loopback listener that refuses every connection the way PostgreSQL does when it has no
    slot left: an ErrorResponse (FATAL, SQLSTATE 53300, `message`) to the startup packet."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def refuse(client: socket.socket) -> None:
        with client:
            while True:
                length = struct.unpack("!I", client.recv(4))[0]
                body = client.recv(length - 4)
                if struct.unpack("!I", body[:4])[0] in (80877103, 80877104):  # SSL / GSS encryption request
                    client.sendall(b"N")
                    continue
                fields = b"".join(k + v.encode() + b"\0" for k, v in
                                  ((b"S", "FATAL"), (b"V", "FATAL"), (b"C", "53300"), (b"M", message)))
                client.sendall(b"E" + struct.pack("!I", len(fields) + 5) + fields + b"\0")
                return

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                client, _address = server.accept()
            except TimeoutError:
                continue
            refuse(client)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def django_connect_error(port: int, blocker) -> OperationalError:
    """What Django raises when its PostgreSQL backend cannot connect to 127.0.0.1:`port` (no
    test database involved: pytest-django's guard is lifted for this one connection)."""
    wrapper = DatabaseWrapper({
        **connection.settings_dict, "ENGINE": "django.db.backends.postgresql", "NAME": "ragsite",
        "USER": "ragsite", "PASSWORD": "", "HOST": "127.0.0.1", "PORT": str(port),
        "OPTIONS": {"sslmode": "disable"}, "CONN_HEALTH_CHECKS": False, "CONN_MAX_AGE": 0,
    })
    with blocker.unblock(), pytest.raises(OperationalError) as raised:
        wrapper.ensure_connection()
    return raised.value


@pytest.mark.parametrize("message", [
    "sorry, too many clients already",  # max_connections
    'too many connections for database "ragsite"',  # ALTER DATABASE … CONNECTION LIMIT
    "remaining connection slots are reserved for roles with the SUPERUSER attribute",
])
def test_every_too_many_connections_refusal_is_server_busy(message, django_db_blocker):
    # given: PostgreSQL refusing the connection for lack of a slot
    with refusing_listener(message) as port:
        # when: Django's backend connects
        error = django_connect_error(port, django_db_blocker)
    # then: psycopg gives the message and no SQLSTATE, and it is recognised all the same
    assert message in str(error) and error.__cause__.sqlstate is None
    assert is_saturation(error)
    status, body = error_payload(error)
    assert status == 503
    assert body["code"] == "server_busy" and body["retry_after"] == django_settings.RAG_BUSY_RETRY_AFTER_SECONDS


def test_other_connection_failures_are_not_server_busy(django_db_blocker):
    # given: the database refusing a login for another reason
    with refusing_listener('password authentication failed for user "ragsite"') as port:
        error = django_connect_error(port, django_db_blocker)
    # then
    assert not is_saturation(error)
    assert error_payload(error) is None


def test_a_stream_that_already_started_ends_with_a_stable_busy_error_part(django_db_blocker):
    # given: the database refusing a connection for lack of a slot, wrapped as retrieval wraps it
    with refusing_listener("sorry, too many clients already") as port:
        refused = django_connect_error(port, django_db_blocker)
    try:
        raise FactsUnavailable("知识库事实数据暂时无法读取，请稍后重试。") from refused
    except FactsUnavailable as exc:
        wrapped = exc
    # when: the SSE stream has to end after its first parts
    parts = sse.error(_stable_message(wrapped), text_open=True)
    # then: the AI SDK's error part (a message only), saying the server is busy, then [DONE]
    error = json.loads(parts[1].removeprefix(b"data: "))
    assert error == {"type": "error", "errorText": server_busy().message}
    assert parts[-1] == sse.DONE


# --- a real server on a role whose connections are used up ----------------------------------------


def admin_connect(dbname: str) -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"],
                           password=db["PASSWORD"] or None, dbname=dbname, autocommit=True)


@pytest.fixture
def limited_role(db) -> Iterator[str]:
    """A login role with every privilege on the test database's tables and a CONNECTION LIMIT of
    its own; dropped afterwards."""
    role = f"ragsite_busy_{uuid.uuid4().hex[:8]}"
    name = connection.settings_dict["NAME"]
    with admin_connect(name) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT {ROLE_CONNECTION_LIMIT}")
        admin.execute(f'GRANT ALL ON DATABASE "{name}" TO {role}')
        admin.execute(f"GRANT ALL ON SCHEMA public TO {role}")
        admin.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        admin.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
        try:
            yield role
        finally:
            admin.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


@contextmanager
def connections_used_up(role: str) -> Iterator[list[psycopg.Connection]]:
    """Hold the role's connections until PostgreSQL refuses one more (whatever the server still
    holds itself); then give them back."""
    db = connection.settings_dict
    held: list[psycopg.Connection] = []
    refusal = None
    try:
        for _ in range(ROLE_CONNECTION_LIMIT + 1):
            try:
                held.append(psycopg.connect(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=role,
                                            dbname=db["NAME"], autocommit=True))
            except psycopg.OperationalError as exc:
                refusal = exc
                break
        assert refusal is not None and f'too many connections for role "{role}"' in str(refusal), refusal
        yield held
    finally:
        for conn in held:
            conn.close()


def assert_server_busy(response: httpx.Response) -> None:
    assert response.status_code == 503, (response.request.url, response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["retry-after"] == str(django_settings.RAG_BUSY_RETRY_AFTER_SECONDS)
    body = response.json()
    assert body["code"] == "server_busy", body
    assert body["retry_after"] == django_settings.RAG_BUSY_RETRY_AFTER_SECONDS
    assert "connections" not in body["detail"]


def api_calls(kb_slug: str, *, signed_in: bool) -> list[tuple[str, str, dict | None]]:
    """(method, path, JSON body) of the API paths of each kind: knowledge, retrieval, chat (an
    anonymous caller without a session has no conversation to list: no query is needed)."""
    return [
        ("GET", "/api/knowledge-bases/", None),
        ("GET", f"/api/knowledge-bases/{kb_slug}/", None),
        ("GET", f"/api/knowledge-bases/{kb_slug}/faqs/", None),
        ("POST", "/api/retrieval/search", {"knowledge_base_id": kb_slug, "question": RAG_QUESTION}),
        ("POST", "/api/retrieval/explain", {"knowledge_base_id": kb_slug, "question": RAG_QUESTION}),
        ("POST", "/api/chat", {"knowledge_base_id": kb_slug, "question": FAQ_QUESTION}),
    ] + ([("GET", "/api/chat/conversations", None)] if signed_in else [])


@postgres_only
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
def test_out_of_connections_every_api_path_is_a_503_and_the_next_request_is_served(
    faults_kb, staff_user, limited_role, settings, debug
):
    # given: a live server connecting as a role whose connections a test can use up
    settings.DEBUG = debug
    token = Token.objects.create(user=staff_user).key
    callers = {"anonymous": {}, "token": {"Authorization": f"Token {token}"}}
    with daphne_server(database_user=limited_role, database_pool=False) as base_url, httpx.Client(base_url=base_url, timeout=60) as client:
        with connections_used_up(limited_role):
            for name, headers in callers.items():
                for method, path, body in api_calls(faults_kb.slug, signed_in=bool(headers)):
                    # when
                    response = client.request(method, path, json=body, headers=headers)
                    # then
                    assert_server_busy(response)
                # and: the stream is refused before it starts, in the same shape
                response, parts = post_stream(base_url, {"knowledge_base_id": faults_kb.slug, "question": FAQ_QUESTION},
                                              headers=headers)
                assert parts == []
                assert_server_busy(response)
            # and: a page says so too, as a page
            page = client.get("/")
            assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
            assert page.headers["retry-after"] == str(django_settings.RAG_BUSY_RETRY_AFTER_SECONDS)

        # when: the connections are free again
        # then: the next requests are served
        for name, headers in callers.items():
            for method, path, body in api_calls(faults_kb.slug, signed_in=bool(headers)):
                response = client.request(method, path, json=body, headers=headers)
                assert response.status_code == 200, (name, path, response.status_code, response.text[:300])
            response, parts = post_stream(base_url, {"knowledge_base_id": faults_kb.slug, "question": FAQ_QUESTION},
                                          headers=headers)
            assert response.status_code == 200 and FAQ_ANSWER in text_of(parts)
        assert client.get("/").status_code == 200


@postgres_only
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_out_of_connections_a_websocket_question_ends_with_an_error_event_and_the_socket_stays(
    faults_kb, limited_role
):
    question = json.dumps({"type": "question", "knowledge_base_id": faults_kb.slug, "question": FAQ_QUESTION})
    with daphne_server(database_user=limited_role, database_pool=False) as base_url, \
            connect(ws_url(base_url), origin=base_url, proxy=None, open_timeout=30) as socket_:
        # given: an open socket, then the database out of connections
        with connections_used_up(limited_role):
            # when
            socket_.send(question)
            event = json.loads(socket_.recv(timeout=60))
            # then: the turn ends with a coded error event
            assert event["type"] == "error", event
            assert event["code"] == "server_busy"
            assert event["retry_after"] == django_settings.RAG_BUSY_RETRY_AFTER_SECONDS

        # when: the connections are free again, on the same socket
        socket_.send(question)
        events = []
        while not events or events[-1]["type"] not in ("end", "error"):
            events.append(json.loads(socket_.recv(timeout=60)))
        # then: the question is answered
        assert events[-1]["type"] == "end", events[-1]
        assert events[-1]["answer"] == FAQ_ANSWER
