"""The background worker: sweep documents whose run died, then run django-tasks' db_worker
while a sweeper thread keeps re-queuing documents whose lease expired (a worker killed
mid-document is picked up by any other worker within about one lease)."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterator

from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import DatabaseError, connection

from knowledge.documents.status import lease_seconds
from knowledge.documents.ingestion.queue import requeue_stale_documents

logger = logging.getLogger(__name__)

# A poll that ran this long before failing was healthy: its failure is a new outage.
_HEALTHY_SECONDS = 60.0


class Command(BaseCommand):
    help = "恢复中断的文档处理任务，然后启动后台任务处理进程。"

    def add_arguments(self, parser):
        parser.add_argument("--batch", action="store_true", help="process outstanding tasks, then exit")

    def handle(self, *args, **options):
        stop = threading.Event()
        sweeper = threading.Thread(target=self._sweep, args=(stop,), name="ingestion-sweeper", daemon=True)
        try:
            self._requeue_interrupted()
            if not options["batch"]:
                sweeper.start()
            self._poll(batch=options["batch"])
        finally:
            stop.set()

    def _requeue_interrupted(self) -> None:
        for delay in _backoff():
            try:
                requeued = requeue_stale_documents()
            except DatabaseError as exc:
                self._wait_for_database(exc, delay)
                continue
            if requeued:
                self.stdout.write(f"re-queued {len(requeued)} interrupted documents: {requeued}")
            return

    def _poll(self, *, batch: bool) -> None:
        """django-tasks' worker, run again after a database error: its poll gives up on a lock
        it did not get within the busy timeout (SQLite, while another process writes) or on a
        lost connection (PostgreSQL restarted), and a worker that exits on either leaves the
        queue unserved until someone restarts it. A task's own failure is the task's (recorded
        on its row); only errors of the poll itself reach here."""
        delays = _backoff()
        while True:
            started = time.monotonic()
            try:
                call_command("db_worker", queue_name="*", interval=0.5, batch=batch, reload=False,
                             startup_delay=False)
                return
            except DatabaseError as exc:
                if time.monotonic() - started > _HEALTHY_SECONDS:
                    delays = _backoff()  # a new outage after a good run starts with short waits
                self._wait_for_database(exc, next(delays))

    def _wait_for_database(self, exc: DatabaseError, delay: float) -> None:
        logger.warning("database unavailable to the ingestion worker (%s: %s); polling again in %.1f s",
                       type(exc).__name__, exc, delay)
        # A connection that failed mid-transaction is unusable; the next poll opens a new one.
        connection.close_if_unusable_or_obsolete()
        time.sleep(delay)

    @staticmethod
    def _sweep(stop: threading.Event) -> None:
        interval = max(lease_seconds() / 2, 0.5)
        try:
            while not stop.wait(interval):
                try:
                    requeued = requeue_stale_documents()
                except DatabaseError as exc:
                    logger.warning("stale-document sweep failed: %s", exc)
                    continue
                if requeued:
                    logger.info("re-queued documents whose lease expired: %s", requeued)
        finally:
            connection.close()


def _backoff(*, first: float = 0.5, longest: float = 30.0) -> Iterator[float]:
    """0.5, 1, 2 … 30, 30 … seconds: a lock passes within the first waits, a database being
    restarted is not polled more than twice a minute."""
    for attempt in itertools.count():
        yield min(first * 2**attempt, longest)
