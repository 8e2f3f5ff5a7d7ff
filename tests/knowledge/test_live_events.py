"""Ingestion progress reaches a browser over SSE from another process (daphne + a real client)."""

from __future__ import annotations

import json
import queue
import threading
import time

import httpx
import pytest

from knowledge.events import kb_channel
from knowledge.eventstream import send
from tests.conftest import make_kb
from tests.live import daphne_server, session_cookie_for

pytestmark = pytest.mark.django_db(transaction=True)


def read_events(url: str, cookies: dict, sink: queue.Queue, stop: threading.Event) -> None:
    """A minimal EventSource: puts (event, data) pairs on the queue until told to stop."""
    try:
        with httpx.Client(cookies=cookies, timeout=httpx.Timeout(10.0, read=30.0)) as client:
            with client.stream("GET", url) as response:
                sink.put(("status", response.status_code))
                event = None
                for line in response.iter_lines():
                    if stop.is_set():
                        return
                    if line.startswith("event:"):
                        event = line.split(":", 1)[1].strip()
                    elif line.startswith("data:") and event:
                        sink.put((event, line.split(":", 1)[1].strip()))
    except httpx.TransportError:
        if not stop.is_set():  # the server going away at the end of the test is expected
            raise


def wait_for(sink: queue.Queue, wanted: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kind, data = sink.get(timeout=0.5)
        except queue.Empty:
            continue
        if kind == wanted:
            return data
    raise AssertionError(f"no {wanted!r} event within {timeout} s")


def test_progress_events_from_another_process_reach_the_browser(staff_user):
    # given: the admin page's EventSource connected to a real daphne server
    kb = make_kb()
    cookies = session_cookie_for(staff_user)
    sink: queue.Queue = queue.Queue()
    stop = threading.Event()
    with daphne_server() as base_url:
        reader = threading.Thread(target=read_events, args=(f"{base_url}/events/kb/{kb.pk}/", cookies, sink, stop), daemon=True)
        reader.start()
        assert wait_for(sink, "status") == 200
        wait_for(sink, "stream-open")
        # when: a worker (this process, not the server) publishes a status change
        send(kb_channel(kb.pk), "document", {"kb": kb.pk, "document": 42, "status": "indexing", "status_label": "索引中"})
        # then
        payload = json.loads(wait_for(sink, "document"))
        stop.set()
        reader.join(timeout=1)
    assert payload == {"kb": kb.pk, "document": 42, "status": "indexing", "status_label": "索引中"}


def test_progress_stream_is_for_the_knowledge_bases_editors(member_user):
    # given: an internal KB the member reads but does not edit
    kb = make_kb()
    # when
    with daphne_server() as base_url:
        response = httpx.get(f"{base_url}/events/kb/{kb.pk}/", cookies=session_cookie_for(member_user), timeout=10)
        anonymous = httpx.get(f"{base_url}/events/kb/{kb.pk}/", timeout=10)
    # then: a reader is refused, and to anybody else it does not exist
    assert response.status_code == 403 and response.json()["code"] == "editor_required"
    assert anonymous.status_code == 404 and anonymous.json()["code"] == "knowledge_base_not_found"
