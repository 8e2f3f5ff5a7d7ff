"""A draft becomes READY exactly when its last pending document is done, whoever finishes it,
and a finished document is never undone by the draft's state (real transactions and threads)."""

from __future__ import annotations

import threading

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection

from knowledge.documents.ingestion import announce
from knowledge.documents.ingestion import runner
from knowledge.catalog import readiness
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.documents.ingestion.tasks import ingest_document
from knowledge.models import Chunk, Document, DocumentStatus, KnowledgeBaseVersion, VersionStatus
from tests.conftest import make_document, make_kb

pytestmark = pytest.mark.django_db(transaction=True)

needs_parallel_writers = pytest.mark.skipif(
    "connection.vendor == 'sqlite'",
    reason="SQLite serialises writers: two transactions cannot both be open for writing (run on PostgreSQL)",
)


def upload(kb, name: str, text: str) -> Document:
    return document_services.upload_documents(kb=kb, files=[SimpleUploadedFile(name, text.encode())], actor=None)[0].document


def draft_of(kb) -> KnowledgeBaseVersion:
    return KnowledgeBaseVersion.objects.filter(knowledge_base=kb).order_by("-number").first()


@needs_parallel_writers
def test_two_workers_finishing_the_last_two_documents_at_once_leave_the_draft_ready(
    milvus, media_root, monkeypatch
):
    # given: two queued documents of one draft (no inline worker: the threads are the workers)
    kb = make_kb()
    first, second = upload(kb, "a.txt", "年假有十五天。"), upload(kb, "b.txt", "病假需要证明。")
    both_checked = threading.Barrier(2)
    real_refresh = runner.refresh_version_readiness

    def refresh_then_wait(**kwargs):
        # The worst interleaving: each worker has checked before the other one goes on.
        outcome = real_refresh(**kwargs)
        both_checked.wait(timeout=20)
        return outcome

    monkeypatch.setattr(runner, "refresh_version_readiness", refresh_then_wait)
    reports: list = []

    def work(document_id: int) -> None:
        try:
            reports.append(ingest_document(document_id=document_id))
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(d.pk,)) for d in (first, second)]

    # when
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # then: both really ran here (claimed, indexed), and the draft is ready
    assert sorted(r.status for r in reports) == [DocumentStatus.READY, DocumentStatus.READY]
    assert all(r.chunk_count > 0 for r in reports)
    assert draft_of(kb).status == VersionStatus.READY


def test_deleting_the_last_pending_document_makes_an_all_ready_draft_ready(milvus, media_root):
    # given: a draft with a READY document and one that will never finish
    kb = make_kb()
    stuck = make_document(kb, status=DocumentStatus.INDEXING)
    draft = catalog_services.create_draft_version(kb=kb, actor=None)
    draft.documents.add(make_document(kb), stuck)

    # when
    catalog_services.delete_document(document=stuck, actor=None)

    # then
    draft.refresh_from_db()
    assert draft.status == VersionStatus.READY


def test_not_ready_yet_is_a_no_op():
    # given
    kb = make_kb()
    draft = catalog_services.create_draft_version(kb=kb, actor=None)
    draft.documents.add(make_document(kb), make_document(kb, status=DocumentStatus.QUEUED))

    # when
    promoted = readiness.refresh_version_readiness(version_ids=[draft.pk, 999_999])

    # then
    assert promoted == []
    draft.refresh_from_db()
    assert draft.status == VersionStatus.BUILDING


def test_an_upload_landing_while_a_document_finishes_never_fails_the_finished_one(
    milvus, run_tasks, media_root, monkeypatch
):
    # given: while A's READY transaction is open, B is uploaded into the same draft
    kb = make_kb()
    late: list[Document] = []
    real_publish = announce.publish_statuses

    def publish_then_upload(documents, status):
        real_publish(documents, status)
        if status == DocumentStatus.READY and not late:
            late.append(make_document(kb, status=DocumentStatus.QUEUED))
            draft_of(kb).documents.add(late[0])

    monkeypatch.setattr(runner, "publish_statuses", publish_then_upload)

    # when
    first = upload(kb, "a.txt", "年假有十五天。")

    # then: A is READY with its chunks, the draft waits for B, nothing raised
    first.refresh_from_db()
    assert first.status == DocumentStatus.READY
    assert Chunk.objects.filter(document=first).exists()
    assert draft_of(kb).status == VersionStatus.BUILDING
