"""Request-rate limits of the costly endpoints (chat and retrieval), for every transport.

DRF throttle classes, scoped: each scope's rate is `REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`
(env-overridable, see settings/base.py); a scope without a rate is not limited. Signed-in users
are counted per user (`*_user` scopes), anonymous callers per client IP (`*_anon_ip`).

Counts live in the Django cache, so with Redis every web process shares them. DRF's own
`SimpleRateThrottle` keeps a request log it reads, edits and writes back: N concurrent requests
all read the same log and all pass. These count in a fixed window with the cache's atomic
`add` + `incr` instead, so at most `rate` requests pass per window however many arrive at once
(a caller may get up to twice the rate across a window boundary).

The client IP is REMOTE_ADDR unless `NUM_PROXIES` (RAG_NUM_PROXIES) says how many proxies in
front of the app append to X-Forwarded-For: DRF's default (None) would trust whatever
X-Forwarded-For a client sends, so every forged value would be a fresh budget.
"""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

from django.http.request import HttpHeaders
from django.utils.translation import gettext as _
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle

from ragsite.errors import CACHE_ERRORS

logger = logging.getLogger(__name__)

CHAT_USER = "chat_user"
CHAT_ANON_IP = "chat_anon_ip"
RETRIEVAL_USER = "retrieval_user"
RETRIEVAL_ANON_IP = "retrieval_anon_ip"
SCOPES = (CHAT_USER, CHAT_ANON_IP, RETRIEVAL_USER, RETRIEVAL_ANON_IP)


def parse_rate(rate: str | None) -> tuple[int, int] | None:
    """(requests, seconds) of "N/period" (period s, m, h or d, optionally written out: "min",
    "hour"), or None for no limit; ValueError for anything else."""
    if rate is None or not str(rate).strip():
        return None
    num, _slash, period = str(rate).strip().partition("/")
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(period.strip()[:1].lower())
    if not num.strip().isdigit() or seconds is None or int(num) < 1:
        raise ValueError(f"throttle rate must look like 30/min, not {rate!r}")
    return int(num), seconds


class ScopedThrottle(SimpleRateThrottle):
    """One scope, for either signed-in users (per user) or anonymous callers (per client IP)."""

    scope: str = ""
    for_authenticated = True

    def __init__(self) -> None:
        self.wait_seconds: float | None = None
        super().__init__()

    def get_rate(self) -> str | None:
        # Read per request: DRF binds THROTTLE_RATES once at import, which settings changed
        # later (tests, a reloaded configuration) would never reach.
        return (api_settings.DEFAULT_THROTTLE_RATES or {}).get(self.scope)

    def parse_rate(self, rate):
        parsed = parse_rate(rate)
        return parsed if parsed is not None else (None, None)

    def get_cache_key(self, request, view) -> str | None:
        user = getattr(request, "user", None)
        if bool(user is not None and user.is_authenticated) != self.for_authenticated:
            return None
        ident = user.pk if self.for_authenticated else client_ip(request)
        return f"throttle:{self.scope}:{ident}"

    def allow_request(self, request, view) -> bool:
        if self.num_requests is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        now = self.timer()
        window = int(now // self.duration)
        window_key = f"{key}:{window}"
        try:
            # The window's counter lives a little longer than the window, then expires by itself.
            self.cache.add(window_key, 0, timeout=self.duration + 1)
            try:
                count = self.cache.incr(window_key)
            except ValueError:  # expired between add and incr: this request opens the window
                self.cache.add(window_key, 1, timeout=self.duration + 1)
                count = 1
        except CACHE_ERRORS as exc:
            # No counter without the cache server: the request is answered, not refused.
            logger.warning("rate limit %s not applied, the cache is unreachable: %s", self.scope, exc)
            return True
        if count <= self.num_requests:
            return True
        self.wait_seconds = (window + 1) * self.duration - now
        return False

    def wait(self) -> float | None:
        return self.wait_seconds


class ChatUserThrottle(ScopedThrottle):
    scope = CHAT_USER


class ChatAnonThrottle(ScopedThrottle):
    scope = CHAT_ANON_IP
    for_authenticated = False


class RetrievalUserThrottle(ScopedThrottle):
    scope = RETRIEVAL_USER


class RetrievalAnonThrottle(ScopedThrottle):
    scope = RETRIEVAL_ANON_IP
    for_authenticated = False


CHAT_THROTTLES = (ChatUserThrottle, ChatAnonThrottle)
RETRIEVAL_THROTTLES = (RetrievalUserThrottle, RetrievalAnonThrottle)


def client_ip(request) -> str:
    """The caller's address as the throttles count it (see the module docstring)."""
    return BaseThrottle().get_ident(request) or ""


def caller_from_scope(scope: dict):
    """A request-like view of an ASGI (WebSocket) scope for the throttles and stream limits:
    `user`, `META` (REMOTE_ADDR and the headers) and `headers`."""
    meta = {"REMOTE_ADDR": (scope.get("client") or ("", 0))[0]}
    for name, value in scope.get("headers") or ():
        key = name.decode("latin-1").upper().replace("-", "_")
        meta[f"HTTP_{key}"] = value.decode("latin-1")
    return SimpleNamespace(user=scope.get("user"), META=meta, headers=HttpHeaders(meta))


def throttle_wait(request, throttle_classes) -> float | None:
    """Seconds to wait when any of the throttles refuses this request, else None (counted).

    For the transports that are not DRF views (SSE, WebSocket); DRF views list the same
    classes in `throttle_classes`.
    """
    waits = []
    for throttle_class in throttle_classes:
        throttle = throttle_class()
        if not throttle.allow_request(request, None):
            waits.append(throttle.wait() or 1.0)
    return max(waits) if waits else None


def retry_after(wait: float | None) -> int:
    return max(1, math.ceil(wait or 1))


def throttled_body(wait: float | None) -> dict:
    """The API's 429 body: the same for DRF views, the SSE stream and the WebSocket."""
    seconds = retry_after(wait)
    return {
        "code": "throttled",
        "detail": _("请求过于频繁，请 %(n)s 秒后再试。") % {"n": seconds},
        "retry_after": seconds,
    }
