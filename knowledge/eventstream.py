"""Ingestion progress over SSE (django-eventstream), across processes.

With Redis configured (production) django-eventstream's own pub/sub carries events between the
worker and web processes. Without Redis (the embedded default) events are appended to the
database storage by whichever process produces them, and each web process runs one relay thread
that forwards new rows to its local SSE listeners — one delivery path per mode, no duplicates.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django_eventstream.channelmanager import DefaultChannelManager

from ragsite.errors import DomainError

from knowledge.access import Role, access_knowledge_base_by_pk

logger = logging.getLogger(__name__)


# Where an EventSource that cannot send a Last-Event-ID header says where to resume.
RESUME_PARAMETER = "lastEventId"


def kb_channel(kb_id: int) -> str:
    return f"kb-{kb_id}"


class KnowledgeChannelManager(DefaultChannelManager):
    """`kb-<id>` channels carry ingestion progress, which only the knowledge base's editors watch."""

    def get_channels_for_request(self, request, view_kwargs) -> set[str]:
        # The URL's knowledge base and nothing else: never channels named in the query string.
        return {kb_channel(int(view_kwargs["kb_id"]))}

    def can_read_channel(self, user, channel: str) -> bool:
        prefix, _, kb_id = channel.partition("-")
        if prefix != "kb" or not kb_id.isdigit():
            return False
        try:
            access_knowledge_base_by_pk(user=user, pk=int(kb_id), role=Role.EDITOR)
        except DomainError:
            return False
        return True


def uses_redis() -> bool:
    return hasattr(settings, "EVENTSTREAM_REDIS")


def send(channel: str, event: str, payload: dict) -> None:
    if uses_redis():
        from django_eventstream import send_event

        send_event(channel, event, payload)
        return
    from django_eventstream.utils import get_storage

    get_storage().append_event(channel, event, json.dumps(payload, ensure_ascii=False))


class DatabaseRelay(threading.Thread):
    """Polls the event table and hands new events to this process's SSE listeners."""

    def __init__(self, interval: float = 0.5) -> None:
        from django_eventstream.models import Event as EventRow

        super().__init__(name="eventstream-relay", daemon=True)
        self.interval = interval
        # The baseline is taken before the first listener is served, so nothing written after
        # a browser connects can fall between the baseline and the first poll.
        self.last_row_id = EventRow.objects.order_by("-id").values_list("id", flat=True).first() or 0

    def run(self) -> None:
        while True:
            try:
                self.forward_new_events()
            except DatabaseError as exc:
                # Keep relaying after a database hiccup; events are hints, the rows stay the truth.
                logger.warning("event relay could not read events: %s", exc)
            finally:
                close_old_connections()
            time.sleep(self.interval)

    def forward_new_events(self) -> int:
        from django_eventstream.event import Event
        from django_eventstream.models import Event as EventRow
        from django_eventstream.views import get_listener_manager

        rows = list(EventRow.objects.filter(id__gt=self.last_row_id).order_by("id")[:500])
        manager = get_listener_manager()
        forwarded = 0
        for row in rows:
            self.last_row_id = row.id
            if not row.eid:
                continue  # the storage's per-channel placeholder row (eid 0, no data)
            try:
                # The storage keeps the SSE payload (a JSON string) JSON-encoded once more.
                payload = json.loads(row.data)
            except json.JSONDecodeError:
                logger.warning("skipping undecodable event %s on %s", row.id, row.channel)
                continue
            manager.add_to_queues(row.channel, Event(row.channel, row.type, payload, id=row.eid))
            forwarded += 1
        return forwarded


_relay_lock = threading.Lock()
_relay: DatabaseRelay | None = None


def ensure_relay() -> None:
    global _relay
    if uses_redis():
        return
    with _relay_lock:
        if _relay is None or not _relay.is_alive():
            _relay = DatabaseRelay()
            _relay.start()
