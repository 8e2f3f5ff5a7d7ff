"""Progress events on a knowledge base's stream (`/events/kb/<id>/`), sent after commit.

The admin document list listens to this stream and updates rows live. Events are hints for
humans watching; the database stays the truth, so a lost event costs a refresh, never data.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, transaction

from knowledge.eventstream import kb_channel, send

logger = logging.getLogger(__name__)


def publish_kb_event(*, kb_id: int, event: str, data: dict[str, Any]) -> None:
    payload = {"kb": kb_id, **data}
    transaction.on_commit(lambda: _send(kb_channel(kb_id), event, payload))


def _send(channel: str, event: str, payload: dict[str, Any]) -> None:
    try:
        send(channel, event, payload)
    except (OSError, ConnectionError, DatabaseError) as exc:
        # The event bus being down must not fail the write that already committed.
        logger.warning("could not publish %s on %s: %s", event, channel, exc)
