"""Database connections around slow work that needs none."""

from __future__ import annotations

from django.db import connection


def release_connection() -> None:
    """Give this thread's connection back (to the pool, or closed without one) before waiting on
    something slow that needs no database, such as a model streaming an answer for seconds; the
    next query takes a connection again. Inside a transaction the connection stays: closing it
    would end the transaction."""
    if not connection.in_atomic_block:
        connection.close()
