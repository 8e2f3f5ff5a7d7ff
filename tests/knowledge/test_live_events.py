"""Ingestion progress reaches a browser over SSE from another process (daphne + a real client)."""

from __future__ import annotations

import json
import queue
import threading
import time

import httpx
import jwt
import pytest
from django.conf import settings

from knowledge.catalog import services as catalog_services
from knowledge.eventstream import kb_channel, send
from knowledge.models import Visibility
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


def read_until(sink: queue.Queue, last, timeout: float = 15.0) -> list[tuple[str, str]]:
    """Every (event, data) up to the first for which `last(event, data)` holds, or up to the timeout."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kind, data = sink.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append((kind, data))
        if last(kind, data):
            break
    return seen


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


# The test settings' key is short; the token is an attacker's, signed with it all the same.
@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_a_forged_es_meta_reads_nothing_but_the_urls_knowledge_base(engineers_group, engineer_user, staff_user):
    # given: a stored event on a knowledge base the engineer may not see, and one the engineer edits
    hidden = make_kb(visibility=Visibility.RESTRICTED)
    own = catalog_services.update_knowledge_base(kb=make_kb(), actor=None, editor_groups=[engineers_group])
    send(kb_channel(hidden.pk), "document", {"kb": hidden.pk, "document": 7, "title": "绝密文件"})
    send(kb_channel(own.pk), "document", {"kb": own.pk, "document": 6, "title": "错过的文件"})
    # django-eventstream trusts an es-meta token naming channels and a user, signed with the
    # key the server runs with (here the same settings, forked): signing is no defence.
    forged = jwt.encode(
        {"channels": [kb_channel(hidden.pk)], "user": staff_user.pk, "exp": int(time.time()) + 600},
        settings.SECRET_KEY, algorithm="HS256",
    )
    sink: queue.Queue = queue.Queue()
    stop = threading.Event()
    with daphne_server() as base_url:
        # when: the engineer asks for their own stream with the forged token, resuming both
        # channels from their start
        resume = f"{kb_channel(hidden.pk)}:0,{kb_channel(own.pk)}:0"
        url = f"{base_url}/events/kb/{own.pk}/?es-meta={forged}&lastEventId={resume}"
        reader = threading.Thread(target=read_events, args=(url, session_cookie_for(engineer_user), sink, stop), daemon=True)
        reader.start()
        status = wait_for(sink, "status")
        wait_for(sink, "stream-open")
        send(kb_channel(own.pk), "document", {"kb": own.pk, "document": 8, "title": "自己的文件"})
        seen = read_until(sink, lambda kind, data: kind == "document" and json.loads(data)["document"] == 8)
        stop.set()
        reader.join(timeout=1)
    # then: the stream is the URL's knowledge base's, for the user the session says, resumed
    # where the client asked
    assert status == 200
    documents = [json.loads(data) for kind, data in seen if kind == "document"]
    assert documents == [{"kb": own.pk, "document": 6, "title": "错过的文件"}, {"kb": own.pk, "document": 8, "title": "自己的文件"}]
    assert "绝密文件" not in json.dumps(seen, ensure_ascii=False)


# The test settings' key is short; the token is an attacker's, signed with it all the same.
@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
def test_a_forged_es_meta_cannot_open_a_stream_the_session_may_not_read(engineer_user, staff_user):
    # given: a knowledge base the engineer does not edit, and a token that says they are staff
    kb = make_kb()
    forged = jwt.encode(
        {"channels": [kb_channel(kb.pk)], "user": staff_user.pk, "exp": int(time.time()) + 600},
        settings.SECRET_KEY, algorithm="HS256",
    )
    # when
    with daphne_server() as base_url:
        response = httpx.get(f"{base_url}/events/kb/{kb.pk}/?es-meta={forged}", cookies=session_cookie_for(engineer_user), timeout=10)
    # then: refused as without the token (a reader of an internal knowledge base)
    assert response.status_code == 403 and response.json()["code"] == "editor_required"
