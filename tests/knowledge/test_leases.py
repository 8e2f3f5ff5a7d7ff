"""Claims, leases and heartbeats: a run that lost its document writes nothing; stale means
"lease expired"; a document whose runs keep dying stops in FAILED; check_index finds drift."""

from __future__ import annotations

import io
import time
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.utils import timezone

from engines.ports import ChunkRecord
from knowledge.documents import status as document_status
from knowledge.documents.ingestion import runner
from knowledge.documents import services as document_services
from knowledge.documents.consistency import check_knowledge_base
from knowledge.documents.ingestion.queue import requeue_stale_documents
from knowledge.documents.ingestion.tasks import ingest_document
from knowledge.models import Chunk, Document, DocumentStatus
from knowledge.vectors import store_for
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db(transaction=True)

TEXT = "# 年假\n\n入职满一年的员工每年享有 15 天带薪年假。\n\n# 病假\n\n病假需要医院证明。"


def queued_document(kb, name="a.md", text=TEXT) -> Document:
    return document_services.upload_documents(kb=kb, files=[SimpleUploadedFile(name, text.encode())], actor=None)[0].document


def expire(document: Document) -> None:
    Document.objects.filter(pk=document.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def test_a_claim_carries_a_token_a_lease_and_the_worker():
    # given
    kb = make_kb()
    document = queued_document(kb)

    # when
    claim = document_status.claim(document_id=document.pk, worker="host:1")
    again = document_status.claim(document_id=document.pk, worker="host:2")

    # then
    document.refresh_from_db()
    assert again is None  # one run at a time
    assert (document.status, document.lease_token, document.worker, document.attempts) == (
        DocumentStatus.PARSING, claim.token, "host:1", 1,
    )
    assert document.lease_expires_at > timezone.now()


def test_a_run_whose_lease_was_taken_over_writes_nothing(milvus, media_root):
    # given: run A's lease expired, the sweep re-queued the document and run B claimed it
    kb = make_kb()
    document = queued_document(kb)
    first = document_status.claim(document_id=document.pk, worker="a")
    expire(document)
    assert requeue_stale_documents() == [document.pk]
    second = document_status.claim(document_id=document.pk, worker="b")

    # when / then: every write of A is refused, none of them touches B's claim
    assert document_status.advance_many([first], DocumentStatus.INDEXING) == []
    assert document_status.finish_many([(first, {"chunk_count": 1})]) == []
    assert document_status.retry_later(first, code="embedding_failed", message="A") is False
    runner._fail(document, first, "internal_error", "A crashed late")
    document.refresh_from_db()
    assert (document.status, document.lease_token, document.error_code) == (DocumentStatus.PARSING, second.token, "")


def test_a_run_that_loses_its_document_mid_way_stops_and_the_new_run_wins(milvus, media_root, monkeypatch):
    # given: while run A parses, its lease expires and run B processes the document to the end
    kb = make_kb()
    document = queued_document(kb)
    real_parse = runner.parse_document
    reports = []
    taken_over = []

    def parse_while_taken_over(*args, **kwargs):
        if not taken_over:
            taken_over.append(True)
            expire(document)
            requeue_stale_documents()
            reports.append(ingest_document(document_id=document.pk))  # run B, start to finish
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(runner, "parse_document", parse_while_taken_over)

    # when: run A
    outcome = ingest_document(document_id=document.pk)

    # then: A stopped without writing; B's chunks and vectors are the document's, consistent
    assert outcome.status == "lease_lost"
    assert reports[0].status == DocumentStatus.READY
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY and document.attempts == 2
    assert Chunk.objects.filter(document=document).count() == reports[0].chunk_count
    assert check_knowledge_base(kb).clean


def test_the_heartbeat_keeps_a_long_run_from_being_stolen(milvus, media_root, settings, monkeypatch):
    # given: a lease of 0.6 s and a parse that takes 2 s
    settings.RAG_INGESTION_LEASE_SECONDS = 0.6
    kb = make_kb()
    document = queued_document(kb)
    real_parse = runner.parse_document
    swept = []

    def slow_parse(*args, **kwargs):
        for _ in range(4):
            time.sleep(0.5)
            swept.extend(requeue_stale_documents())  # another worker's sweep, meanwhile
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(runner, "parse_document", slow_parse)

    # when
    report = ingest_document(document_id=document.pk)

    # then
    assert swept == []
    assert report.status == DocumentStatus.READY
    document.refresh_from_db()
    assert document.attempts == 1 and document.heartbeat_at is not None


def test_a_document_whose_runs_keep_dying_stops_in_failed(settings):
    # given: the third run died too
    settings.RAG_INGESTION_MAX_ATTEMPTS = 3
    kb = make_kb()
    document = queued_document(kb)
    for _ in range(3):
        document_status.claim(document_id=document.pk)
        expire(document)
        if Document.objects.get(pk=document.pk).attempts < 3:
            requeue_stale_documents()

    # when
    requeued = requeue_stale_documents()

    # then
    document.refresh_from_db()
    assert requeued == []
    assert (document.status, document.error_code) == (DocumentStatus.FAILED, "too_many_attempts")
    assert "3 次" in document.error_message


def test_check_index_reports_and_repairs_drift(milvus, run_tasks, media_root):
    # given: a ready document one of whose vectors is gone, and a stray vector
    kb = make_kb()
    document = queued_document(kb)
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY
    chunk = Chunk.objects.filter(document=document).first()
    store = store_for(kb)
    store.delete_chunks(kb_id=kb.pk, chunk_ids=[chunk.pk])
    store.upsert_chunks([ChunkRecord(chunk_id=999_999, kb_id=kb.pk, document_id=document.pk, content="残留",
                                     content_type="text", vector=[1.0] + [0.0] * (kb.embedding_dimension - 1))])

    # when
    out = io.StringIO()
    with pytest.raises(CommandError, match="不一致"):
        call_command("check_index", "--kb", kb.slug, stdout=out)
    call_command("check_index", "--kb", kb.slug, "--repair", stdout=io.StringIO())
    after = io.StringIO()
    call_command("check_index", "--kb", kb.slug, stdout=after)

    # then
    assert "1 chunks without vector in 1 ready documents, 1 stray vectors" in out.getvalue()
    assert f"{kb.slug}: ok" in after.getvalue()


class FlakyEmbedder:
    """The KB's real embedder behind a model server that is down for the first `failures` calls."""

    def __init__(self, real, failures: int) -> None:
        self.real, self.failures, self.calls = real, failures, 0
        self.model, self.dimension = real.model, real.dimension

    def embed_documents(self, texts):
        from engines.ports import ProviderUnavailable

        self.calls += 1
        if self.calls <= self.failures:
            raise ProviderUnavailable("model server down")
        return self.real.embed_documents(texts)


def flaky(monkeypatch, failures: int) -> FlakyEmbedder:
    real_for = runner._embedder_for
    box = {}

    def embedder_for(kb):
        if "e" not in box:
            box["e"] = FlakyEmbedder(real_for(kb), failures)
        return box["e"]

    monkeypatch.setattr(runner, "_embedder_for", embedder_for)
    return box


def test_a_transient_failure_is_retried_and_the_document_ends_ready(milvus, run_tasks, media_root, monkeypatch):
    # given: the model server is down for the first embedding call
    flaky(monkeypatch, failures=1)
    kb = make_kb()

    # when (the inline queue runs the retry at once; a real one after the backoff)
    document = queued_document(kb)

    # then
    document.refresh_from_db()
    assert (document.status, document.attempts, document.error_code) == (DocumentStatus.READY, 2, "")


def test_a_failure_that_persists_stops_in_failed_after_the_attempts(milvus, run_tasks, media_root, monkeypatch, settings):
    # given
    settings.RAG_INGESTION_MAX_ATTEMPTS = 3
    flaky(monkeypatch, failures=99)
    kb = make_kb()

    # when
    document = queued_document(kb)

    # then: three runs, then FAILED with the reason, never silently
    document.refresh_from_db()
    assert (document.status, document.attempts, document.error_code) == (DocumentStatus.FAILED, 3, "embedding_failed")


def test_a_retry_waits_for_its_backoff_in_the_queue(milvus, database_tasks, media_root, monkeypatch, settings):
    # given
    from django_tasks_db.models import DBTaskResult

    settings.RAG_INGESTION_RETRY_BASE_SECONDS = 30
    flaky(monkeypatch, failures=1)
    kb = make_kb()
    document = queued_document(kb)

    # when: a worker runs the first task
    report = ingest_document(document_id=document.pk)

    # then: back in the queue with the reason and a task that may not run for 30 s
    document.refresh_from_db()
    assert report.status == "retry_scheduled"
    assert document.status == DocumentStatus.QUEUED and document.error_code == "embedding_failed"
    assert "30 秒后自动重试" in document.error_message
    retry = DBTaskResult.objects.filter(status="READY").order_by("-enqueued_at").first()
    assert retry.run_after is not None and retry.run_after > timezone.now() + timedelta(seconds=20)


def test_retrying_a_failed_document_gives_it_its_attempts_again(milvus, run_tasks, media_root, monkeypatch, settings):
    # given: a document that failed after its three attempts
    settings.RAG_INGESTION_MAX_ATTEMPTS = 3
    box = flaky(monkeypatch, failures=3)
    kb = make_kb()
    document = queued_document(kb)
    document.refresh_from_db()
    assert document.status == DocumentStatus.FAILED

    # when: the model is back and staff press retry
    document_services.retry_document(document=document, actor=None)

    # then
    document.refresh_from_db()
    assert (document.status, document.attempts) == (DocumentStatus.READY, 1)
    assert box["e"].calls == 4
    assert check_knowledge_base(kb).clean


def test_check_index_with_milvus_down_is_a_clear_error(settings, db):
    # given
    from engines.milvus_store import reset_vector_store_cache

    kb = make_kb()
    settings.MILVUS_URI = "http://127.0.0.1:9"
    reset_vector_store_cache()

    # when / then: a message, not a traceback
    with pytest.raises(CommandError, match=f"无法读取 {kb.slug} 的向量库"):
        call_command("check_index", "--kb", kb.slug, stdout=io.StringIO())
    reset_vector_store_cache()


def test_a_run_that_fails_after_writing_vectors_leaves_none_behind(milvus, run_tasks, media_root, monkeypatch):
    # given: the READY write crashes after the vectors went to Milvus
    real_finish = document_status.finish_many

    def crash(items):
        raise RuntimeError("database went away")

    monkeypatch.setattr(document_status, "finish_many", crash)
    kb = make_kb()

    # when (the inline queue records the crash as the task's result)
    queued_document(kb)

    # then: FAILED, no rows, no vectors; a retry starts clean
    document = Document.objects.get(knowledge_base=kb)
    assert (document.status, document.error_code) == (DocumentStatus.FAILED, "internal_error")
    assert store_for(kb).chunk_ids(kb_id=kb.pk) == {}
    monkeypatch.setattr(document_status, "finish_many", real_finish)
    document_services.retry_document(document=document, actor=None)
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY and check_knowledge_base(kb).clean
