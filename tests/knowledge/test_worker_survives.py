"""A real `ingestion_worker` whose database cannot be used for a while goes on polling once it
can, on both backends: SQLite's write lock held by another process past the busy timeout (what
a long item import did under `make run`), PostgreSQL's connections terminated under it (a
restart, a failover). Before, django-tasks' poll raised the error and the worker exited."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import psycopg.sql
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django_tasks.base import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from knowledge.documents import services as document_services
from knowledge.models import Document, DocumentStatus
from tests.conftest import make_kb
from tests.live import database_url, eventually

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
OUTAGE = "database unavailable to the ingestion worker"


def start_worker(settings, media_root, tmp_path, kb) -> subprocess.Popen:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "RAG_", "MILVUS_", "DATABASE_"))},
        "DJANGO_SETTINGS_MODULE": "ragsite.settings.local",
        "DATABASE_URL": database_url(),
        # A lock (SQLite) or a pooled connection (PostgreSQL) not granted within a second fails the
        # poll; 30 s and 10 s by default.
        "DATABASE_SQLITE_TIMEOUT": "1", "DATABASE_POOL_TIMEOUT": "1",
        "RAGSITE_VAR_DIR": str(tmp_path / "var"), "MEDIA_ROOT": str(media_root),
        "MILVUS_URI": settings.MILVUS_URI, "MILVUS_COLLECTION_PREFIX": settings.MILVUS_COLLECTION_PREFIX,
        "RAG_EMBEDDING_MODEL": kb.embedding_model, "RAG_EMBEDDING_DIMENSION": str(kb.embedding_dimension),
        "RAG_WARM_UP": "false", "RAG_OCR_ENABLED": "false",
    }
    log = (tmp_path / "worker.log").open("w")
    return subprocess.Popen([sys.executable, "manage.py", "ingestion_worker"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, text=True)


def upload(kb, name: str) -> Document:
    text = f"# {name}\n\n报销需在费用发生后 30 天内提交，{name}。"
    document_services.upload_documents(kb=kb, actor=None, files=[SimpleUploadedFile(f"{name}.md", text.encode())])
    return Document.objects.get(knowledge_base=kb, original_name=f"{name}.md")


def ready(document: Document) -> bool:
    document.refresh_from_db()
    return document.status == DocumentStatus.READY


def make_database_unusable() -> None:
    """For a few seconds, longer than the worker waits for a lock or a connection. SQLite: the
    write lock held by another connection. PostgreSQL: the test database refusing connections
    and its open ones terminated, as during a restart (terminating them alone is not enough: the
    pool checks a connection before lending it and opens another)."""
    if connection.vendor == "sqlite":
        locker = sqlite3.connect(connection.settings_dict["NAME"], timeout=30, isolation_level=None)
        try:
            locker.execute("BEGIN IMMEDIATE")
            time.sleep(4.0)
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        return
    db = connection.settings_dict
    name = psycopg.sql.Identifier(db["NAME"])
    with psycopg.connect(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"],
                         password=db["PASSWORD"] or None, dbname="postgres", autocommit=True) as admin:
        admin.execute(psycopg.sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(name))
        try:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [db["NAME"]])
            time.sleep(4.0)
        finally:
            admin.execute(psycopg.sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(name))
    # The test's own connections were among them, and its pool may have tried to replace them
    # while the database refused (it then waits a while before trying again): start afresh.
    connection.close()
    if getattr(connection, "pool", None) is not None:
        connection.close_pool()


def queue_idle() -> bool:
    """No task waiting or running: what follows a document's READY (the version's readiness) has
    finished too, so the outage meets the worker polling, not inside a task."""
    return not DBTaskResult.objects.filter(status__in=[TaskResultStatus.READY, TaskResultStatus.RUNNING]).exists()


def test_a_worker_goes_on_polling_after_the_database_was_unusable(milvus, media_root, database_tasks, settings,
                                                                   tmp_path):
    # given: a worker that has processed a document (it is up and polling)
    kb = make_kb()
    worker = start_worker(settings, media_root, tmp_path, kb)
    log = tmp_path / "worker.log"
    try:
        first = upload(kb, "差旅制度")
        assert eventually(lambda: ready(first) and queue_idle(), within=120), log.read_text()[-3000:]

        # when: its database cannot be used for a while
        make_database_unusable()

        # then: it said so, is still running, and processes the next document
        assert eventually(lambda: OUTAGE in log.read_text(), within=30), log.read_text()[-3000:]
        assert worker.poll() is None, log.read_text()[-3000:]
        second = upload(kb, "报销制度")
        assert eventually(lambda: ready(second), within=120), log.read_text()[-3000:]
        assert worker.poll() is None
    finally:
        worker.terminate()
        worker.wait(timeout=30)
