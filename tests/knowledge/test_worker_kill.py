"""Two real `ingestion_worker` processes on one queue; one is killed with SIGKILL in the middle
of a document. Every document ends READY once, no draft is left building, and Milvus and the
database agree chunk for chunk (PostgreSQL: the workers write in parallel)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection  # noqa: F401  (read by the skipif condition below)

from knowledge.documents import services as document_services
from knowledge.documents.consistency import check_knowledge_base
from knowledge.models import Chunk, Document, DocumentStatus, KnowledgeBaseVersion, VersionStatus
from tests.conftest import make_kb
from tests.live import database_url

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor == 'sqlite'", reason="parallel writers need PostgreSQL"),
]

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = 10


def long_text(n: int) -> str:
    # Long enough (about 1 s to chunk and embed) that a worker is caught in the middle of one.
    lines = [f"第 {n} 号制度第 {i} 条：员工出差住宿标准按城市级别执行，报销需在返回后三十日内提交，"
             f"审批人为直属主管，超出标准的部分由本人承担，编号 XH-{n:03d}-{i:04d}。" for i in range(1500)]
    return "\n\n".join(lines)


def worker(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "ingestion_worker"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )


def test_a_worker_killed_mid_document_loses_nothing(milvus, media_root, database_tasks, settings, tmp_path):
    # given: ten queued documents of one draft, and two workers on the test database
    kb = make_kb()
    document_services.upload_documents(
        kb=kb, actor=None,
        files=[SimpleUploadedFile(f"制度{n}.txt", long_text(n).encode()) for n in range(DOCUMENTS)],
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "RAG_", "MILVUS_", "DATABASE_URL"))},
        "DJANGO_SETTINGS_MODULE": "ragsite.settings.local",
        "DATABASE_URL": database_url(),
        "RAGSITE_VAR_DIR": str(tmp_path / "var"), "MEDIA_ROOT": str(media_root),
        "MILVUS_URI": settings.MILVUS_URI, "MILVUS_COLLECTION_PREFIX": settings.MILVUS_COLLECTION_PREFIX,
        "RAG_EMBEDDING_MODEL": kb.embedding_model, "RAG_EMBEDDING_DIMENSION": str(kb.embedding_dimension),
        "RAG_INGESTION_LEASE_SECONDS": "3", "RAG_WARM_UP": "false", "RAG_OCR_ENABLED": "false",
    }
    doomed, survivor = worker(env), worker(env)
    try:
        # when: the first worker is killed while it holds a document
        deadline = time.monotonic() + 60
        held = None
        while time.monotonic() < deadline and held is None:
            held = Document.objects.filter(
                knowledge_base=kb, status__in=[DocumentStatus.PARSING, DocumentStatus.INDEXING],
                worker__endswith=f":{doomed.pid}",
            ).values_list("pk", flat=True).first()
            time.sleep(0.05)
        assert held is not None, "the first worker never claimed a document"
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=10)

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if not Document.objects.filter(knowledge_base=kb).exclude(
                status__in=[DocumentStatus.READY, DocumentStatus.FAILED]
            ).exists():
                break
            time.sleep(0.2)
    finally:
        for process in (doomed, survivor):
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=20)

    # then: all READY, the killed one taken over once, the draft ready, the index consistent
    statuses = dict(Document.objects.filter(knowledge_base=kb).values_list("pk", "status"))
    assert set(statuses.values()) == {DocumentStatus.READY}, (statuses, survivor.stderr.read()[-3000:])
    taken_over = Document.objects.get(pk=held)
    assert taken_over.attempts == 2 and not taken_over.worker.endswith(f":{doomed.pid}")
    assert all(d.chunk_count == Chunk.objects.filter(document=d).count() > 0
               for d in Document.objects.filter(knowledge_base=kb))
    assert KnowledgeBaseVersion.objects.get(knowledge_base=kb).status == VersionStatus.READY
    drift = check_knowledge_base(kb)
    assert drift.clean, (drift.missing, drift.orphans)
