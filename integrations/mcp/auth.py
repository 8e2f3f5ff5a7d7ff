"""Who calls the MCP endpoint: the API's own DRF tokens, read from the Authorization header.

`Token <key>` is the API's scheme; `Bearer <key>` is what MCP clients send (their configs have
a bearer-token field), and means the same key. No header is an anonymous caller, who reads the
public knowledge bases only, as on the API; a header of another scheme is ignored, as DRF's
token authentication ignores it. There is no session: MCP clients keep no cookies, so the
session authenticator (and its CSRF check) has nothing to read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AnonymousUser
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

SCHEMES = ("token", "bearer")


class Unauthenticated(Exception):
    """A token scheme with a key that is missing, malformed, unknown or of an inactive user."""


def caller_user(authorization: str):
    """The user of the `Authorization` header's token, or AnonymousUser without one. Runs a
    query: call it in a worker thread."""
    scheme, _space, key = authorization.strip().partition(" ")
    if scheme.lower() not in SCHEMES:
        return AnonymousUser()
    key = key.strip()
    if not key or " " in key:
        raise Unauthenticated(scheme)
    try:
        user, _token = TokenAuthentication().authenticate_credentials(key)
    except AuthenticationFailed as exc:
        raise Unauthenticated(scheme) from exc
    return user


@dataclass(frozen=True)
class McpCaller:
    """One HTTP request's caller, as the endpoint found it before the MCP protocol runs; the
    tools read it from the request's ASGI scope (`SCOPE_KEY`)."""

    user: Any
    # Request-like (`user`, `META`, `headers`) for the throttles and the concurrent-answer
    # slots, which count signed-in users per user and anonymous callers per client address.
    request: Any
    language: str  # of the error texts and labels: Accept-Language, as LocaleMiddleware reads it
    base_url: str  # scheme and host the client reached us at: links in results are absolute


SCOPE_KEY = "ragsite.mcp_caller"
