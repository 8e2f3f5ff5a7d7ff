"""Answers running at once per caller (SSE, WebSocket and JSON), counted in the Django cache.

A caller (a signed-in user, or an anonymous client IP as the throttles see it) has N slots, the
cache keys `streams:<caller>:0..N-1`; a stream takes the first free one with the cache's atomic
`add` (SET NX on Redis), so two processes can never take the same slot. A slot is a lease: it
expires after RAG_STREAM_SLOT_TTL_SECONDS unless its stream renews it, which it does every third
of that while its turn's worker runs. A process that dies mid-stream therefore frees its slots
within one TTL; a live one frees them when the stream ends (or, at the latest, when the turn's
worker thread finishes, even if nobody ever read the response). A JSON answer is a stream
consumed to its end before the response: it holds its slot the same way for as long.

The slot's cache calls are single key operations made from the event loop (for a JSON answer,
from a helper thread): microseconds with the in-process cache, one loopback round trip with Redis.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.core.cache import cache
from django.utils.translation import gettext as _

from ragsite.errors import CACHE_ERRORS
from ragsite.throttles import client_ip

logger = logging.getLogger(__name__)


class StreamSlot:
    def __init__(self, key: str, token: str, ttl: int) -> None:
        self.key = key
        self.token = token
        self.ttl = ttl
        self.released = False
        self._renewal: asyncio.Task | None = None

    def renew(self) -> None:
        if not self.released:
            try:
                cache.touch(self.key, self.ttl)
            except CACHE_ERRORS as exc:  # the lease runs out by itself; the answer goes on
                logger.warning("could not renew an answer slot: %s", exc)

    def release(self) -> None:
        """Idempotent. Deletes the key only while it still holds this stream's token: an expired
        lease may have been taken by another stream since."""
        if self.released:
            return
        self.released = True
        self._stop_renewal()
        try:
            if cache.get(self.key) == self.token:
                cache.delete(self.key)
        except CACHE_ERRORS as exc:  # the lease expires by itself
            logger.warning("could not release an answer slot: %s", exc)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Renew the lease while the block runs in this thread (a turn answered as one JSON
        object), then release it. The renewals come from a helper thread: the block is busy."""
        finished = threading.Event()

        def renew_until_finished() -> None:
            while not finished.wait(max(self.ttl / 3, 0.1)):
                self.renew()

        renewal = threading.Thread(target=renew_until_finished, name="stream-slot-renewal", daemon=True)
        renewal.start()
        try:
            yield
        finally:
            finished.set()
            renewal.join()
            self.release()

    def hold_while(self, work: asyncio.Future) -> None:
        """Renew the lease until `work` (the turn's worker) is done, then release it."""
        self._renewal = asyncio.ensure_future(self._renew_until(work))

    async def _renew_until(self, work: asyncio.Future) -> None:
        interval = max(self.ttl / 3, 0.1)
        try:
            while not work.done() and not self.released:
                # asyncio.wait neither cancels `work` on timeout nor raises its exception.
                done, _pending = await asyncio.wait({work}, timeout=interval)
                if not done:
                    self.renew()
        finally:
            self.release()

    def _stop_renewal(self) -> None:
        renewal = self._renewal
        if renewal is None or renewal.done():
            return
        try:
            current = asyncio.current_task()
        except RuntimeError:  # no running loop
            current = None
        if renewal is not current:
            renewal.cancel()


class _Unlimited(StreamSlot):
    """A limit of 0 means no limit: nothing is counted."""

    def __init__(self) -> None:
        super().__init__("", "", 0)

    def renew(self) -> None:
        pass

    def release(self) -> None:
        self.released = True
        self._stop_renewal()

    @contextmanager
    def held(self) -> Iterator[None]:
        try:  # nothing to renew
            yield
        finally:
            self.release()


def acquire_stream_slot(caller) -> StreamSlot | None:
    """A slot for one more stream of `caller` (anything with `user` and `META`), or None when
    all its slots are taken."""
    user = getattr(caller, "user", None)
    if user is not None and user.is_authenticated:
        ident, limit = f"user:{user.pk}", int(settings.RAG_MAX_STREAMS_PER_USER)
    else:
        ident, limit = f"ip:{client_ip(caller)}", int(settings.RAG_MAX_STREAMS_PER_ANON_IP)
    if limit <= 0:
        return _Unlimited()
    ttl = int(settings.RAG_STREAM_SLOT_TTL_SECONDS)
    token = uuid.uuid4().hex
    try:
        for index in range(limit):
            key = f"streams:{ident}:{index}"
            if cache.add(key, token, timeout=ttl):
                return StreamSlot(key, token, ttl)
    except CACHE_ERRORS as exc:
        # The counters are gone with the cache server: answering unlimited beats not answering.
        logger.warning("concurrent-answer limit not applied, the cache is unreachable: %s", exc)
        return _Unlimited()
    return None


def too_many_streams_body() -> dict:
    return {
        "code": "too_many_streams",
        "detail": _("同时进行的回答过多，请等当前回答结束后再提问。"),
    }
