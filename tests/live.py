"""A real daphne server (separate process) on the test database, for SSE / WebSocket clients."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

from channels.testing.live import make_application, set_database_connection
from daphne.testing import DaphneProcess


@contextmanager
def daphne_server(host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ragsite.asgi in a child process; yields the base URL. Needs committed test data."""
    process = DaphneProcess(host, partial(make_application, static_wrapper=None), setup=set_database_connection)
    process.start()
    try:
        while not process.ready.wait(timeout=1):
            if not process.is_alive():
                raise RuntimeError("daphne did not start")
        yield f"http://{host}:{process.port.value}"
    finally:
        process.terminate()
        process.join(timeout=10)
