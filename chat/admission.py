"""Letting one question in, on every transport (the SSE view, the WebSocket consumer, the JSON view).

The same steps in the same order on all: rate limits, validation, a concurrent-answer slot,
then who asks. Runs in a worker thread: claiming an anonymous reader's session saves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ragsite.api import error_payload
from ragsite.db import release_connection
from ragsite.errors import DomainError
from ragsite.limits import StreamSlot, acquire_stream_slot, too_many_streams_body
from ragsite.throttles import CHAT_THROTTLES, throttle_wait, throttled_body

from .access import requester_of
from .contracts import ChatQuery, Requester
from .serializers import ChatRequestInput


@dataclass(frozen=True)
class Admitted:
    query: ChatQuery
    requester: Requester
    slot: StreamSlot  # the transport releases it when its turn ends


@dataclass(frozen=True)
class Refused:
    status: int
    body: dict  # the API's error shape: code, detail and the error's own fields (`retry_after`)


def admit_question(*, caller, body: dict, session) -> Admitted | Refused:
    """`caller`: the request (Django's or DRF's), or a request-like view of a WebSocket scope
    (`user`, `META`).

    The database connection that reading the caller took (token, session) is given back before
    this returns: a streaming transport's request lasts as long as its answer, and would hold it
    all that time while the turn's own stages wait for one."""
    try:
        return _admit(caller=caller, body=body, session=session)
    finally:
        release_connection()


def _admit(*, caller, body: dict, session) -> Admitted | Refused:
    wait = throttle_wait(caller, CHAT_THROTTLES)
    if wait is not None:
        return Refused(429, throttled_body(wait))
    try:
        query = ChatRequestInput.query_from(body, user=caller.user)
    except DomainError as exc:
        status, payload = error_payload(exc)
        return Refused(status, payload)
    slot = acquire_stream_slot(caller)
    if slot is None:
        return Refused(429, too_many_streams_body())
    try:
        requester = requester_of(user=caller.user, session=session, claim_session=True)
    except BaseException:
        slot.release()
        raise
    return Admitted(query=query, requester=requester, slot=slot)
