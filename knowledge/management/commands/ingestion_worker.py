"""The background worker: sweep documents whose run died, then run django-tasks' db_worker
while a sweeper thread keeps re-queuing documents whose lease expired (a worker killed
mid-document is picked up by any other worker within about one lease)."""

from __future__ import annotations

import logging
import threading

from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import DatabaseError, connection

from knowledge.documents.status import lease_seconds
from knowledge.documents.ingestion.queue import requeue_stale_documents

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "恢复中断的文档处理任务，然后启动后台任务处理进程。"

    def add_arguments(self, parser):
        parser.add_argument("--batch", action="store_true", help="process outstanding tasks, then exit")

    def handle(self, *args, **options):
        requeued = requeue_stale_documents()
        if requeued:
            self.stdout.write(f"re-queued {len(requeued)} interrupted documents: {requeued}")
        stop = threading.Event()
        sweeper = threading.Thread(target=self._sweep, args=(stop,), name="ingestion-sweeper", daemon=True)
        if not options["batch"]:
            sweeper.start()
        try:
            call_command("db_worker", queue_name="*", interval=0.5, batch=options["batch"], reload=False,
                         startup_delay=False)
        finally:
            stop.set()

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
