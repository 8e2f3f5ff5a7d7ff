"""Database connections around slow work that needs none."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import connection

T = TypeVar("T")


def release_connection() -> None:
    """Give this thread's connection back (to the pool, or closed without one) before waiting on
    something slow that needs no database, such as a model writing an answer for seconds; the
    next query takes a connection again. Inside a transaction the connection stays: closing it
    would end the transaction. SQLite's stays too: a file has no server whose connections run
    out, and reopening it (0.19 ms with its pragmas, measured) would only slow every turn."""
    if connection.vendor != "sqlite" and not connection.in_atomic_block:
        connection.close()


def releasing(fn: Callable[[], T]) -> Callable[[], T]:
    """`fn` for a worker thread that serves many requests: whatever connection it took goes
    back when it returns or raises, so an idle worker holds none."""

    def run() -> T:
        try:
            return fn()
        finally:
            release_connection()

    return run
