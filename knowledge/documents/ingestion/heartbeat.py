"""What keeps a running batch's claim alive and visible: the lease heartbeat on its own thread,
and the embedding progress stored and announced while the embed stage lasts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from django.conf import settings
from django.db import DatabaseError, connection

from knowledge import events
from knowledge.documents import status as document_status
from knowledge.documents.ingestion.announce import status_event
from knowledge.documents.status import Claim
from knowledge.models import Document, DocumentStatus

logger = logging.getLogger(__name__)


class Heartbeat:
    """Extends the lease of a run's documents every third of it, on its own thread and
    connection, while the run works; it stops beating once none of them is held any more."""

    def __init__(self, claims: Sequence[Claim]) -> None:
        self.claims = list(claims)
        self._stop = threading.Event()
        name = f"heartbeat-{self.claims[0].document_id}" if self.claims else "heartbeat"
        self._thread = threading.Thread(target=self._beat, name=name, daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def held(self) -> set[int]:
        """The documents still held now (a query, not the last beat's view)."""
        return document_status.held_ids(self.claims)

    def _beat(self) -> None:
        interval = max(document_status.lease_seconds() / 3, 0.2)
        try:
            while not self._stop.wait(interval):
                try:
                    if not document_status.heartbeat_many(self.claims):
                        return
                except DatabaseError as exc:
                    # The next beat may get through; the lease is long enough for a few misses.
                    logger.warning("heartbeat of documents %s failed: %s", [c.document_id for c in self.claims][:5], exc)
        finally:
            connection.close()


class EmbeddingProgress:
    """How far the embed stage of a batch has come, per document: stored under each claim (the
    admin list and the API read it) and announced live, every RAG_INGESTION_PROGRESS_SECONDS
    while the stage lasts, for the documents that moved since the last time. A batch of small
    documents embeds within one interval and costs nothing here; its final count is written
    with READY (`_finish`). A large document takes minutes here; this is how one sees it move."""

    def __init__(self, documents: Sequence[tuple[Claim, Document, int]]) -> None:
        self._documents = list(documents)
        self._interval = float(settings.RAG_INGESTION_PROGRESS_SECONDS)
        self._last = time.monotonic()
        self._stored: dict[int, int] = {}

    def advance(self, embedded: int) -> None:
        now = time.monotonic()
        if now - self._last < self._interval:
            return
        self._last = now
        moved, offset = [], 0
        for claim, document, count in self._documents:
            done = min(max(embedded - offset, 0), count)
            offset += count
            if self._stored.get(document.pk) != done:
                moved.append((claim, document, done, count))
        if not moved:
            return
        try:
            held = document_status.record_progress(progress=[(claim, done, count) for claim, _d, done, count in moved])
        except DatabaseError as exc:
            # Progress is a view of the run, not its result: the run goes on without it.
            logger.warning("could not store the embedding progress of documents %s: %s",
                           [claim.document_id for claim, *_rest in moved][:5], exc)
            return
        by_kb: dict[int, list[dict]] = {}
        for _claim, document, done, count in moved:
            if document.pk in held:
                self._stored[document.pk] = done
                document.embedded_chunks, document.chunks_to_embed = done, count
                by_kb.setdefault(document.knowledge_base_id, []).append(status_event(
                    document, DocumentStatus.INDEXING, embedded_chunks=done, chunks_to_embed=count,
                    progress_label=document.embedding_progress(),
                ))
        for kb_id, items in by_kb.items():
            events.publish_kb_event(kb_id=kb_id, event="documents", data={"documents": items})


