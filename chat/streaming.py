"""Running a turn under an event loop, for SSE and WebSocket.

`TurnRunner` drives `RAGService`'s phases and hands their events to the loop through an
asyncio queue:

0. A place among the RAG_CHAT_MAX_ACTIVE_TURNS turns a process runs at once: past what its CPU
   serves in time every answer would be late, so a turn waits at most
   RAG_CHAT_QUEUE_TIMEOUT_SECONDS for one, then ends with 503 `server_busy` (nothing stored).
1. `open` + `prepare` (access, the stored question, routing, retrieval, composition of the
   evidence) in a worker of the bounded `chat-turn` pool: no ORM, gRPC or embedding call ever
   blocks the loop. A turn that finds every worker busy waits at most
   RAG_CHAT_QUEUE_TIMEOUT_SECONDS for one, then ends with 503 `server_busy` as well.
2. The model's answer: a remote model (`AsyncAnswerer`) streams on the loop itself, so the
   seconds a model takes to write cost no thread and a process holds as many answers as its
   sockets allow; the local extractive model, which computes rather than waits, runs in the
   same worker as step 1.
3. `conclude` (support, confidence, the answer stored with its evidence) in a worker again.

`cancel()` (client disconnect, stop button) sets the pipeline's cancel event and stops the
model's stream at once: retrieval stops waiting, the provider sees the hang-up, and the turn is
stored as cancelled. Evidence always precedes the answer, and the stored answer is what the
client was sent, as in the threaded `RAGService.run`.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from django.conf import settings
from django.db import close_old_connections
from django.utils import translation

from ragsite.executors import CHAT_TURN, Gate, pool, run_admitted

from .answering.ports import AsyncAnswerer
from .contracts import ChatQuery, Requester, TurnCancelled
from .pipeline.events import Delta, Event, Evidence
from .pipeline.rag import PendingAnswer, RAGService
from .pipeline.state import TurnState

T = TypeVar("T")
COALESCE_MAX_DELTAS = 8
# Turns running at once in this process, from admission to the stored answer.
ACTIVE_TURNS = Gate(lambda: settings.RAG_CHAT_MAX_ACTIVE_TURNS)


@dataclass(frozen=True)
class Outcome:
    kind: str  # "event" | "error" | "done"
    value: Any = None


@dataclass(frozen=True)
class Preface:
    """What a stream has before the answer's text: the turn's events up to its evidence, or what
    ended the turn before it — `error`, or `ended` when it finished without evidence (the
    pipeline never does; a transport answers that as an internal error)."""

    events: tuple[Event, ...]
    error: BaseException | None = None
    ended: bool = False

    @property
    def complete(self) -> bool:
        return self.error is None and not self.ended


class TurnRunner:
    def __init__(self, *, query: ChatQuery, requester: Requester, service: RAGService | None = None) -> None:
        self.query = query
        self.requester = requester
        self.service = service or RAGService()
        self.cancelled = threading.Event()
        self._outbox: deque[Outcome] = deque()
        self._ready = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task | None = None
        self._streaming: asyncio.Task | None = None
        # Worker threads do not inherit the request's context: carry its language over.
        self._language = translation.get_language()

    def start(self) -> TurnRunner:
        self._task = self._loop.create_task(self._drive())
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
        """Done once the turn stopped (answered, failed or cancelled), whatever the transport did."""
        return self._task

    async def next(self) -> Outcome:
        while not self._outbox:
            self._ready.clear()
            await self._ready.wait()
        return self._outbox.popleft()

    async def preface(self) -> Preface:
        """The events up to the evidence: a streaming transport answers failures until then as
        an ordinary error response, and starts its stream only after it."""
        events: list[Event] = []
        try:
            while True:
                outcome = await self.next()
                if outcome.kind == "error":
                    return Preface(tuple(events), error=outcome.value)
                if outcome.kind == "done":
                    return Preface(tuple(events), ended=True)
                events.append(outcome.value)
                if isinstance(outcome.value, Evidence):
                    return Preface(tuple(events))
        except asyncio.CancelledError:
            self.cancel()
            raise

    async def next_coalesced(self) -> Outcome:
        """`next()`, with the deltas already waiting behind a delta joined into it: a client that
        reads slower than the model writes gets fewer, longer pieces of the same text, and the
        server writes (and frames) one part instead of many. At most COALESCE_MAX_DELTAS are
        joined: an answer computed at once (the local model's) still arrives as a stream."""
        outcome = await self.next()
        if not _is_delta(outcome):
            return outcome
        texts = [outcome.value.text]
        while self._outbox and _is_delta(self._outbox[0]) and len(texts) < COALESCE_MAX_DELTAS:
            texts.append(self._outbox.popleft().value.text)
        return outcome if len(texts) == 1 else Outcome("event", Delta("".join(texts)))

    def _deliver(self, outcome: Outcome) -> None:
        """On the loop: queue an outcome for `next()`."""
        self._outbox.append(outcome)
        self._ready.set()

    def cancel(self) -> None:
        self.cancelled.set()
        if self._streaming is not None:
            self._streaming.cancel()

    # --- the phases ---------------------------------------------------------------------------

    async def _drive(self) -> None:
        wait = settings.RAG_CHAT_QUEUE_TIMEOUT_SECONDS
        try:
            async with ACTIVE_TURNS.passage(wait=wait):
                pending = await run_admitted(pool(CHAT_TURN), self._in_worker(self._prepare), wait=wait)
                if pending is not None:
                    await self._stream(pending)
                    await self._loop.run_in_executor(pool(CHAT_TURN),
                                                     self._in_worker(lambda: self._conclude(pending)))
        except BaseException as exc:  # noqa: BLE001 — handed to the transport, which decides
            self._deliver(Outcome("error", exc))
            if not isinstance(exc, Exception):
                raise
        else:
            self._deliver(Outcome("done"))

    def _prepare(self) -> PendingAnswer | None:
        if self.cancelled.is_set():  # gone while the turn waited for a worker: nothing to store
            raise TurnCancelled("the client went away")
        turn = self.service.open(query=self.query, requester=self.requester, cancel=self.cancelled)
        with self._failures(turn):
            pending = self._forward(self.service.prepare(turn))
            if pending is None or isinstance(pending.answerer, AsyncAnswerer):
                return pending
            self._forward(self.service.stream(pending))
            self._forward(self.service.conclude(pending))
            return None

    async def _stream(self, pending: PendingAnswer) -> None:
        self._streaming = self._loop.create_task(self._relay(pending))
        try:
            if self.cancelled.is_set():
                self._streaming.cancel()
            await self._streaming
        except BaseException as exc:
            ended = (TurnCancelled("the client went away")
                     if isinstance(exc, asyncio.CancelledError) and self.cancelled.is_set() else exc)
            failure = await self._loop.run_in_executor(
                pool(CHAT_TURN), self._in_worker(partial(self.service.failure, pending.turn, ended))
            )
            raise failure
        finally:
            self._streaming = None

    async def _relay(self, pending: PendingAnswer) -> None:
        async for event in self.service.astream(pending):
            self._deliver(Outcome("event", event))

    def _conclude(self, pending: PendingAnswer) -> None:
        with self._failures(pending.turn):
            self._forward(self.service.conclude(pending))

    # --- in the worker ------------------------------------------------------------------------

    def _in_worker(self, work: Callable[[], T]) -> Callable[[], T]:
        def run() -> T:
            with translation.override(self._language):
                # Pool threads are reused: start and end with a healthy connection (given back
                # to the pool, on PostgreSQL), as Django's request cycle does.
                close_old_connections()
                try:
                    return work()
                finally:
                    close_old_connections()

        return run

    def _failures(self, turn: TurnState):
        return _Failures(self.service, turn)

    def _forward(self, events: Iterator[Event]) -> Any:
        """Hand each event to the loop; the phase's return value. A cancel stops the phase."""
        while True:
            try:
                event = next(events)
            except StopIteration as stop:
                return stop.value
            if self.cancelled.is_set():
                events.close()
                raise TurnCancelled("the client went away")
            self._put(Outcome("event", event))

    def _put(self, outcome: Outcome) -> None:
        try:
            self._loop.call_soon_threadsafe(self._deliver, outcome)
        except RuntimeError:  # the loop is gone (server shutting down): nobody is listening
            self.cancelled.set()


def _is_delta(outcome: Outcome) -> bool:
    return outcome.kind == "event" and isinstance(outcome.value, Delta)


class _Failures:
    """`with` block around a worker's phase: whatever ends it is stored with the turn
    (`RAGService.failure`) and raised as the exception the transports know."""

    def __init__(self, service: RAGService, turn: TurnState) -> None:
        self.service = service
        self.turn = turn

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, traceback) -> bool:
        if exc is None:
            return False
        failure = self.service.failure(self.turn, exc)
        if failure is exc:
            return False
        raise failure  # its cause is set: `RAGService.failure` builds it as `raise … from`
