"""A real daphne server (separate process) on the test database, for SSE / WebSocket clients."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

from channels.testing.live import make_application
from daphne.testing import DaphneProcess


def _fresh_connections() -> None:
    """In the forked server: forget the parent's database sockets without closing them.

    The child inherits settings already pointing at the test database (pytest-django switched
    them before the fork), so only the open connections must not be shared.
    """
    from django.db import connections
    from django.db.backends.postgresql.base import DatabaseWrapper

    for connection in connections.all(initialized_only=True):
        connection.connection = None
    # The parent's connection pools too: their connections are the parent's sockets and their
    # worker threads did not survive the fork (a pool would hand the child a socket the parent is
    # using, or wait for a worker that never comes). Kept referenced, never closed: closing would
    # end the parent's sessions.
    _INHERITED_POOLS.extend(DatabaseWrapper._connection_pools.values())
    DatabaseWrapper._connection_pools.clear()


_INHERITED_POOLS: list = []


def _fresh_thread_pools() -> None:
    """In the forked server: forget asgiref's thread pool, as `ragsite.executors` forgets the
    product's own at a fork.

    Threads do not survive a fork, but a pool object does, with its bookkeeping of workers that
    only exist in the parent: work submitted to it in the child would wait forever (a server
    started after a test used a sync view in-process would hang on every request).
    """
    from concurrent.futures import ThreadPoolExecutor

    from asgiref.sync import SyncToAsync

    SyncToAsync.single_thread_executor = ThreadPoolExecutor(max_workers=1)


def _fresh_process(database_user: str | None = None, database_pool: bool = True) -> None:
    from django.db import connections

    from ragsite import telemetry

    _fresh_connections()
    _fresh_thread_pools()
    # As a server process configures its tracing at start: the settings a test changed before
    # the fork (an OTLP endpoint) apply to this child alone.
    telemetry.configure()
    if database_user is not None:
        connections["default"].settings_dict["USER"] = database_user
    if not database_pool:
        connections["default"].settings_dict.get("OPTIONS", {}).pop("pool", None)


def session_cookie_for(user) -> dict[str, str]:
    """The session cookie a browser holds after `user` signed in."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return {settings.SESSION_COOKIE_NAME: session.session_key}


@contextmanager
def daphne_server(
    host: str = "127.0.0.1", *, database_user: str | None = None, database_pool: bool = True
) -> Iterator[str]:
    """Serve ragsite.asgi in a child process; yields the base URL. Needs committed test data.

    `database_user`: the server connects to the test database as this role instead (PostgreSQL;
    a role with a CONNECTION LIMIT of its own lets a test use its connections up).
    `database_pool=False`: a connection per request, as with `DATABASE_POOL_MAX_SIZE=0`."""
    setup = partial(_fresh_process, database_user, database_pool)
    process = DaphneProcess(host, partial(make_application, static_wrapper=None), setup=setup)
    process.start()
    try:
        while not process.ready.wait(timeout=1):
            if not process.is_alive():
                raise RuntimeError("daphne did not start")
        yield f"http://{host}:{process.port.value}"
    finally:
        process.terminate()
        process.join(timeout=10)


def eventually(predicate, *, within: float = 20.0, every: float = 0.05):
    """Poll until `predicate()` is truthy and return its value, or the last falsy one after
    `within` seconds (a bound on waiting for another process, not an assertion about speed)."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


def database_url() -> str:
    """The test database as DATABASE_URL, for a server or worker started as a subprocess: the
    SQLite file or the PostgreSQL database pytest-django made, whichever this run uses."""
    from urllib.parse import quote

    from django.db import connection

    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now, for a server a test starts."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
