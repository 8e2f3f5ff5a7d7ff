"""Running the synchronous pipeline under an event loop (seed 003 §7.5), for SSE and WebSocket.

`TurnRunner` advances `RAGService.run` in a worker thread of a bounded pool and hands events
to the loop through an asyncio queue, so no ORM, gRPC or model call ever blocks the loop and
many turns stream at once. `cancel()` (client disconnect, stop button) sets the pipeline's
cancel event: retrieval stops waiting, the model stream is closed at the next delta, and the
turn is stored as cancelled.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.utils import translation

from .contracts import ChatQuery, Requester
from .pipeline.rag import RAGService

_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def turn_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=int(getattr(settings, "RAG_CHAT_THREADS", 32)), thread_name_prefix="chat-turn"
            )
        return _pool


@dataclass(frozen=True)
class Outcome:
    kind: str  # "event" | "error" | "done"
    value: Any = None


class TurnRunner:
    def __init__(self, *, query: ChatQuery, requester: Requester, service: RAGService | None = None) -> None:
        self.query = query
        self.requester = requester
        self.service = service or RAGService()
        self.cancelled = threading.Event()
        self._queue: asyncio.Queue[Outcome] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._future = None
        # The worker thread does not inherit the request's context: carry its language over.
        self._language = translation.get_language()

    def start(self) -> TurnRunner:
        self._future = self._loop.run_in_executor(turn_pool(), self._work)
        return self

    def start_holding(self, slot) -> TurnRunner:
        """start(), with the caller's stream slot (`ragsite.limits`) held while the work runs,
        and given back at once if the work cannot start."""
        try:
            self.start()
        except BaseException:
            slot.release()
            raise
        slot.hold_while(self.work)
        return self

    @property
    def work(self) -> asyncio.Future:
        """Done once the pipeline stopped in its worker thread, whatever the transport did."""
        return self._future

    async def next(self) -> Outcome:
        return await self._queue.get()

    def cancel(self) -> None:
        self.cancelled.set()

    def _put(self, outcome: Outcome) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, outcome)
        except RuntimeError:  # the loop is gone (server shutting down): nobody is listening
            self.cancelled.set()

    def _work(self) -> None:
        with translation.override(self._language):
            self._advance()

    def _advance(self) -> None:
        close_old_connections()
        events = self.service.run(query=self.query, requester=self.requester, cancel=self.cancelled)
        try:
            for event in events:
                if self.cancelled.is_set():
                    events.close()  # stores the turn as cancelled
                    break
                self._put(Outcome("event", event))
        except BaseException as exc:  # noqa: BLE001 — handed to the loop, which decides
            self._put(Outcome("error", exc))
        else:
            self._put(Outcome("done"))
        finally:
            # Pool threads are reused: keep a healthy connection within CONN_MAX_AGE, like
            # Django's request cycle does, rather than reconnecting for every turn.
            close_old_connections()
