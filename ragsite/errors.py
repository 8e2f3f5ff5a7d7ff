"""Domain errors raised by services and selectors.

Each has a stable machine `code` (API clients switch on it) and a human message (Chinese by
default, translated through Django i18n). Views never build error payloads themselves.
"""

from __future__ import annotations

from typing import Any


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
