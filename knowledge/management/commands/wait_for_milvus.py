"""Block until the configured Milvus answers (the web and worker start after the Milvus Lite server)."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "等待 Milvus 可用。"

    def add_arguments(self, parser):
        parser.add_argument("--timeout", type=float, default=60.0)

    def handle(self, *args, **options):
        from pymilvus import MilvusClient
        from pymilvus.exceptions import MilvusException

        deadline = time.monotonic() + options["timeout"]
        last_error = ""
        while time.monotonic() < deadline:
            try:
                client = MilvusClient(uri=settings.MILVUS_URI, token=settings.MILVUS_TOKEN or "", timeout=2)
                client.list_collections()
                client.close()
                return
            except MilvusException as exc:
                last_error = str(exc)
            time.sleep(0.5)
        raise CommandError(f"Milvus 在 {options['timeout']:.0f} 秒内未就绪（{settings.MILVUS_URI}）：{last_error}")
