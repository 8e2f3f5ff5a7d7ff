"""The process's thread pools, built in one place: lazily, once each, sized from settings.

- `chat-turn` (RAG_CHAT_THREADS): the CPU- and database-bound stages of chat turns (routing,
  preparation, retrieval, composition, storing the answer). A remote model's answer streams on
  the event loop instead, so a turn holds a thread only while it computes, not while it waits.
- `retrieval` (RAG_RETRIEVAL_THREADS): the parallel channels of one search (dense, sparse, FAQ),
  shared by every request.

`run_admitted` is the back-pressure in front of a pool: a job that finds every worker busy waits
at most its budget for one, then gives up with `ServerBusy` (503 + Retry-After) instead of
queueing without bound behind work the server cannot finish in time. `Gate` bounds work in
flight on the event loop the same way (answers streaming at once): a process that took more
than its CPU can serve would make every one of them late, not just the last ones.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from django.conf import settings

from ragsite.errors import server_busy

T = TypeVar("T")

logger = logging.getLogger(__name__)

CHAT_TURN = "chat-turn"
RETRIEVAL = "retrieval"
_SIZES = {CHAT_TURN: "RAG_CHAT_THREADS", RETRIEVAL: "RAG_RETRIEVAL_THREADS"}

_lock = threading.Lock()
_pools: dict[str, ThreadPoolExecutor] = {}


def _forget_pools() -> None:
    """In a forked child: threads do not survive a fork but a pool object does, with its
    bookkeeping of workers that exist only in the parent; work submitted to it would wait
    forever. The child builds its own pools on first use."""
    global _lock
    _lock = threading.Lock()
    _pools.clear()


os.register_at_fork(after_in_child=_forget_pools)


def pool(name: str) -> ThreadPoolExecutor:
    with _lock:
        executor = _pools.get(name)
        if executor is None:
            size = int(getattr(settings, _SIZES[name]))
            if size < 1:
                raise ValueError(f"{_SIZES[name]} must be at least 1")
            executor = _pools[name] = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)
        return executor


class _Claim:
    """One job's place in a pool's queue: it runs once a worker takes it, unless its submitter
    stopped waiting first. The lock makes "taken" and "given up" exclusive."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "queued"

    def take(self) -> bool:
        with self._lock:
            if self._state == "abandoned":
                return False
            self._state = "running"
            return True

    def abandon(self) -> bool:
        with self._lock:
            if self._state == "running":
                return False
            self._state = "abandoned"
            return True


async def run_admitted(executor: ThreadPoolExecutor, fn: Callable[[], T], *, wait: float,
                       discard: Callable[[T], None] | None = None) -> T:
    """`fn()` in `executor`, provided a worker takes it within `wait` seconds; `ServerBusy`
    otherwise (nothing of `fn` ran then). Once it runs it runs to its end: cancelling the caller
    does not stop a thread, and what `fn` returns after its caller is gone goes to `discard`
    (on the loop), which gives back what it holds. `fn` runs in a copy of the caller's context
    (the request's language, as `sync_to_async` would carry it)."""
    loop = asyncio.get_running_loop()
    claim = _Claim()
    started = asyncio.Event()

    def job() -> tuple[bool, T | None]:
        if not claim.take():
            return False, None
        loop.call_soon_threadsafe(started.set)
        return True, fn()

    future = loop.run_in_executor(executor, contextvars.copy_context().run, job)
    try:
        await asyncio.wait_for(started.wait(), timeout=wait)
    except asyncio.TimeoutError:
        if claim.abandon():
            future.cancel()
            raise server_busy() from None
    except asyncio.CancelledError:
        # The caller is gone: a job still queued never runs; one already running ends by its
        # own means, and its result is discarded.
        if claim.abandon():
            future.cancel()
        else:
            _discard_when_done(future, discard)
        raise
    try:
        ran, value = await asyncio.shield(future)
    except asyncio.CancelledError:
        _discard_when_done(future, discard)
        raise
    assert ran
    return value


def _discard_when_done(future: asyncio.Future, discard: Callable[[T], None] | None) -> None:
    def done(finished: asyncio.Future) -> None:
        if finished.cancelled():
            return
        error = finished.exception()
        if error is not None:
            # Nobody awaits this job any more: without this line its failure would vanish.
            logger.error("a job whose caller had left failed", exc_info=error)
            return
        ran, value = finished.result()
        if ran and discard is not None:
            discard(value)

    future.add_done_callback(done)


class Gate:
    """At most `size()` holders at once per event loop (a server has one); a newcomer waits at
    most `wait` seconds for a place, then `ServerBusy`. `size` is read when a loop first passes
    the gate, so settings apply as configured at start."""

    def __init__(self, size: Callable[[], int]) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        os.register_at_fork(after_in_child=self._forget)

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._lock:
            semaphore = self._semaphores.get(loop)
            if semaphore is None:
                size = int(self._size())
                if size < 1:
                    raise ValueError("a gate needs room for at least one")
                semaphore = self._semaphores[loop] = asyncio.Semaphore(size)
            return semaphore

    @asynccontextmanager
    async def passage(self, *, wait: float) -> AsyncIterator[None]:
        semaphore = self._semaphore()
        try:
            await asyncio.wait_for(semaphore.acquire(), timeout=wait)
        except asyncio.TimeoutError:
            raise server_busy() from None
        try:
            yield
        finally:
            semaphore.release()

    def _forget(self) -> None:
        """In a forked child (see `_forget_pools`): its loops are new, and the lock may have
        been held by a thread that did not survive the fork."""
        self._lock = threading.Lock()
        self._semaphores = weakref.WeakKeyDictionary()
