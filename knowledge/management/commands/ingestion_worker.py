"""The background worker: re-queue jobs that died mid-way, then run django-tasks' db_worker."""

from __future__ import annotations

from django.core.management import call_command
from django.core.management.base import BaseCommand

from ...ingestion import requeue_stale_documents


class Command(BaseCommand):
    help = "恢复中断的文档处理任务，然后启动后台任务处理进程。"

    def add_arguments(self, parser):
        parser.add_argument("--batch", action="store_true", help="process outstanding tasks, then exit")

    def handle(self, *args, **options):
        requeued = requeue_stale_documents()
        if requeued:
            self.stdout.write(f"re-queued {len(requeued)} interrupted documents: {requeued}")
        call_command("db_worker", queue_name="*", interval=0.5, batch=options["batch"], reload=False, startup_delay=False)
