"""Domain errors raised by services and selectors.

Each has a stable machine `code` (API clients switch on it) and a human message (Chinese by
default, translated through Django i18n). Views never build error payloads themselves.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.db import DatabaseError as DjangoDatabaseError
from django.utils.translation import gettext as _
from psycopg_pool import PoolTimeout

try:
    from redis.exceptions import RedisError
except ImportError:  # redis is only installed with the production requirements
    CACHE_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, OSError)
else:
    # What Django's cache raises when its server (Redis in production) cannot be reached: the
    # cache is an optimisation and the abuse limits' counter, never a reason to fail a request.
    CACHE_ERRORS = (ConnectionError, OSError, RedisError)


class DomainError(Exception):
    code = "error"
    http_status = 400

    def __init__(self, message: Any, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(str(message))
        self.message = message
        if code is not None:
            self.code = code
        self.extra = extra


class ValidationFailed(DomainError):
    code = "invalid_request"
    http_status = 400


class NotFound(DomainError):
    code = "not_found"
    http_status = 404


class Forbidden(DomainError):
    code = "permission_denied"
    http_status = 403


class Conflict(DomainError):
    code = "conflict"
    http_status = 409


class InvalidTransition(DomainError):
    """A state-machine transition that the current state does not allow."""

    code = "invalid_state"
    http_status = 409


class ServiceUnavailable(DomainError):
    code = "service_unavailable"
    http_status = 503


class ServerBusy(ServiceUnavailable):
    """Too busy right now (the database has no connection left for us): the same request may
    well succeed in a few seconds, which `retry_after` says. Not a failure of the request."""

    code = "server_busy"


# PostgreSQL's too_many_connections (SQLSTATE 53300): the server-wide max_connections, a role's
# or a database's CONNECTION LIMIT, the slots reserved for superusers. PostgreSQL refuses those
# at connect time, and for a failed connect libpq hands the driver the server's message only, no
# SQLSTATE (psycopg's `sqlstate` is None then): such errors are recognised by the messages
# PostgreSQL writes for 53300 (in English; a server whose lc_messages is another language is
# recognised by SQLSTATE only, where a driver reports one).
TOO_MANY_CONNECTIONS = "53300"
_TOO_MANY_CONNECTIONS_MESSAGES = re.compile(
    r"sorry, too many clients already"
    r"|too many connections for (?:role|database) "
    r"|remaining connection slots are reserved for"
)


def is_saturation(exc: BaseException | None) -> bool:
    """Whether `exc`, or an error it was raised from (a domain error wrapping a database error,
    say), says the database has no connection left: PostgreSQL refused one, or this process's
    pool had none free within its timeout."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if getattr(exc, "sqlstate", None) == TOO_MANY_CONNECTIONS or isinstance(exc, PoolTimeout):
            return True
        from_database = isinstance(exc, DjangoDatabaseError) or type(exc).__module__.startswith("psycopg")
        if from_database and _TOO_MANY_CONNECTIONS_MESSAGES.search(str(exc)):
            return True
        exc = exc.__cause__ if exc.__cause__ is not None else (None if exc.__suppress_context__ else exc.__context__)
    return False


def server_busy() -> ServerBusy:
    seconds = int(settings.RAG_BUSY_RETRY_AFTER_SECONDS)
    return ServerBusy(_("服务器繁忙，请 %(n)s 秒后重试。") % {"n": seconds}, retry_after=seconds)
