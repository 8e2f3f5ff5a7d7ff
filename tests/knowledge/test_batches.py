"""Documents processed in batches: shared stages once per batch, each document ending on its own."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django_eventstream.models import Event

from knowledge.documents import status as document_status
from knowledge.documents.ingestion import runner
from knowledge.documents import services as document_services
from knowledge.documents.ingestion.queue import queue_documents
from knowledge.documents.ingestion.tasks import ingest_documents
from knowledge.models import (
    Chunk,
    Document,
    DocumentAsset,
    DocumentStatus,
    DocumentTransition,
    KnowledgeBaseVersion,
    VersionStatus,
)
from tests.conftest import make_kb
from tests.docparse.factories import PdfPicture, PdfText, build_pdf, encode, picture

pytestmark = pytest.mark.django_db(transaction=True)


def files(*items: tuple[str, bytes]) -> list[SimpleUploadedFile]:
    return [SimpleUploadedFile(name, data) for name, data in items]


def passages(n: int) -> list[SimpleUploadedFile]:
    return files(*((f"p{i}.txt", f"第 {i} 段：员工每年享有 {i + 5} 天年假。".encode()) for i in range(n)))


def queued(kb, uploads) -> list[int]:
    """Upload without running tasks (the database queue holds them)."""
    return [o.document.pk for o in document_services.upload_documents(kb=kb, files=uploads, actor=None)]


@pytest.fixture
def kb(db):
    return make_kb()


def test_a_batch_shares_one_embedding_call_and_one_upsert(kb, milvus, database_tasks, media_root, monkeypatch):
    # given
    ids = queued(kb, passages(5))
    calls = {"embed": 0, "upsert": 0}
    real_index = runner._index

    def counting_index(kb_, jobs):
        calls["upsert"] += 1
        real_index(kb_, jobs)

    real_embed = runner._embed

    def counting_embed(embedder, contents, kb_, progress):
        calls["embed"] += 1
        return real_embed(embedder, contents, kb_, progress)

    monkeypatch.setattr(runner, "_index", counting_index)
    monkeypatch.setattr(runner, "_embed", counting_embed)

    # when
    reports = ingest_documents(document_ids=ids)

    # then
    assert [r.status for r in reports] == [DocumentStatus.READY] * 5
    assert calls == {"embed": 1, "upsert": 1}
    assert Chunk.objects.filter(document_id__in=ids).count() == 5
    assert all(d.metadata["batch_documents"] == 5 for d in Document.objects.filter(pk__in=ids))
    assert KnowledgeBaseVersion.objects.get(knowledge_base=kb).status == VersionStatus.READY


def test_a_file_that_does_not_parse_fails_alone(kb, milvus, database_tasks, media_root):
    # given: a "PDF" that is not one, between two good files
    ids = queued(kb, files(("a.txt", "年假十五天。".encode()), ("broken.pdf", b"%PDF-1.7\n not really"),
                          ("c.txt", "病假三十天。".encode())))

    # when
    reports = ingest_documents(document_ids=ids)

    # then
    statuses = {d.original_name: d.status for d in Document.objects.filter(pk__in=ids)}
    assert statuses == {"a.txt": "ready", "broken.pdf": "failed", "c.txt": "ready"}
    failed = Document.objects.get(original_name="broken.pdf")
    assert failed.error_code and failed.error_message
    assert [r.status for r in reports] == ["ready", "failed", "ready"]


def test_a_shared_stage_that_crashes_is_rerun_document_by_document(kb, milvus, database_tasks, media_root, monkeypatch):
    # given: the vector write breaks on one document's content, whatever batch it is in
    ids = queued(kb, files(("a.txt", "年假十五天。".encode()), ("poison.txt", "毒药段落。".encode()),
                          ("c.txt", "病假三十天。".encode())))
    real_index = runner._index

    def index(kb_, jobs):
        if any("毒药" in content for job in jobs for content in job.contents):
            raise RuntimeError("unexpected bug on this content")
        real_index(kb_, jobs)

    monkeypatch.setattr(runner, "_index", index)

    # when: the crash is recorded on its document and re-raised for the task result
    with pytest.raises(RuntimeError):
        ingest_documents(document_ids=ids)

    # then: the neighbours are READY with their chunks, only the poisoned one failed
    documents = {d.original_name: d for d in Document.objects.filter(pk__in=ids)}
    assert documents["a.txt"].status == documents["c.txt"].status == DocumentStatus.READY
    assert (documents["poison.txt"].status, documents["poison.txt"].error_code) == (DocumentStatus.FAILED, "internal_error")
    assert not Chunk.objects.filter(document=documents["poison.txt"]).exists()
    assert Chunk.objects.filter(document=documents["a.txt"]).count() == 1


def test_a_refusal_in_a_shared_stage_fails_only_the_document_that_caused_it(kb, milvus, database_tasks, media_root, monkeypatch):
    # given: the model refuses one text (not an outage: retrying would not help)
    ids = queued(kb, files(("a.txt", "年假十五天。".encode()), ("poison.txt", "毒药段落。".encode()),
                          ("c.txt", "病假三十天。".encode())))
    real_embed = runner._embed

    def embed(embedder, contents, kb_, progress):
        if any("毒药" in content for content in contents):
            raise runner.IngestionFailed("embedding_failed", "input rejected by the model")
        return real_embed(embedder, contents, kb_, progress)

    monkeypatch.setattr(runner, "_embed", embed)

    # when
    reports = ingest_documents(document_ids=ids)

    # then: the batch was re-run document by document; only the refused one failed
    assert [r.status for r in reports] == ["ready", "failed", "ready"]
    poison = Document.objects.get(original_name="poison.txt")
    assert (poison.error_code, poison.error_message) == ("embedding_failed", "input rejected by the model")


def test_a_document_taken_over_mid_batch_is_left_to_its_new_owner(kb, milvus, database_tasks, media_root, monkeypatch):
    # given: while the batch embeds, B's lease is taken over (expired, re-queued, claimed again)
    ids = queued(kb, passages(3))
    taken = {}
    real_embed = runner._embed

    def embed_then_take_over(embedder, contents, kb_, progress):
        vectors = real_embed(embedder, contents, kb_, progress)
        document_status.queue(document_ids=[ids[1]])
        taken["claim"] = document_status.claim(document_id=ids[1], worker="other:1")
        return vectors

    monkeypatch.setattr(runner, "_embed", embed_then_take_over)

    # when
    reports = ingest_documents(document_ids=ids)

    # then: A and C finished; B belongs to the other run, untouched by this one
    assert [r.status for r in reports] == ["ready", "lease_lost", "ready"]
    other = Document.objects.get(pk=ids[1])
    assert (other.status, other.lease_token, other.worker) == (DocumentStatus.PARSING, taken["claim"].token, "other:1")
    assert not Chunk.objects.filter(document_id=ids[1]).exists()


def test_a_transient_failure_sends_the_whole_batch_back_to_the_queue(kb, milvus, database_tasks, media_root, monkeypatch):
    # given: the model server is down
    from engines.ports import ProviderUnavailable

    ids = queued(kb, passages(3))

    def down(embedder, contents, kb_, progress):
        raise runner.IngestionFailed("embedding_failed", "down", transient=True) from ProviderUnavailable("down")

    monkeypatch.setattr(runner, "_embed", down)

    # when
    reports = ingest_documents(document_ids=ids)

    # then: each is queued again with the reason, and the batch comes back as one deferred task
    from django_tasks_db.models import DBTaskResult

    assert [r.status for r in reports] == ["retry_scheduled"] * 3
    assert set(Document.objects.filter(pk__in=ids).values_list("status", "error_code")) == {("queued", "embedding_failed")}
    batches = [row.args_kwargs["kwargs"]["document_ids"] for row in DBTaskResult.objects.order_by("enqueued_at", "id")]
    assert batches == [ids, ids]  # the upload's task, then one retry task (not three)


def test_progress_events_come_once_per_stage_for_the_whole_batch(kb, milvus, database_tasks, media_root):
    # given
    ids = queued(kb, passages(4))

    # when
    ingest_documents(document_ids=ids)

    # then
    events = [json.loads(json.loads(e.data)) for e in Event.objects.filter(channel=f"kb-{kb.pk}", type="documents").order_by("id")]
    assert [sorted(item["document"] for item in e["documents"]) for e in events] == [sorted(ids)] * 3
    assert [{item["status"] for item in e["documents"]} for e in events] == [{"parsing"}, {"indexing"}, {"ready"}]


def test_embedding_progress_of_a_batch_is_stored_only_for_documents_that_moved(kb, milvus, database_tasks, media_root, settings, monkeypatch):
    # given: two documents in one batch, progress stored at every embedding call
    settings.RAG_INGESTION_PROGRESS_SECONDS = 0
    monkeypatch.setattr(runner, "EMBED_BATCH", 1)
    ids = queued(kb, passages(2))

    # when
    ingest_documents(document_ids=ids)

    # then: one event per call, each naming only the document whose count changed
    events = [json.loads(json.loads(e.data)) for e in Event.objects.filter(channel=f"kb-{kb.pk}", type="documents").order_by("id")]
    progress = [[(i["document"], i["embedded_chunks"], i["chunks_to_embed"]) for i in e["documents"]]
                for e in events if "embedded_chunks" in e["documents"][0]]
    assert progress == [[(ids[0], 0, 1), (ids[1], 0, 1)], [(ids[0], 1, 1)], [(ids[1], 1, 1)]]
    assert set(Document.objects.filter(pk__in=ids).values_list("embedded_chunks", "chunks_to_embed")) == {(1, 1)}


def test_each_document_gets_its_timeline(kb, milvus, database_tasks, media_root):
    # given
    [pk] = queued(kb, passages(1))

    # when
    ingest_documents(document_ids=[pk])

    # then
    steps = list(DocumentTransition.objects.filter(document_id=pk).order_by("at", "id").values_list("status", "attempt"))
    assert steps == [("queued", None), ("parsing", 1), ("indexing", 1), ("ready", 1)]
    assert DocumentTransition.objects.filter(document_id=pk, status="parsing").get().worker


def test_queued_documents_are_grouped_into_tasks_by_count_and_bytes(kb, database_tasks, media_root, settings):
    # given
    from django_tasks_db.models import DBTaskResult

    settings.RAG_INGESTION_BATCH_DOCUMENTS = 3
    settings.RAG_INGESTION_BATCH_BYTES = 10_000
    big = SimpleUploadedFile("big.txt", ("长" * 4000).encode())  # 12,000 bytes: a task of its own

    # when
    ids = queued(kb, passages(7) + [big])

    # then
    batches = [row.args_kwargs["kwargs"]["document_ids"] for row in DBTaskResult.objects.order_by("enqueued_at", "id")]
    assert batches == [ids[0:3], ids[3:6], ids[6:7], ids[7:8]]


def test_asset_images_of_a_failed_row_transaction_are_removed(kb, milvus, database_tasks, media_root, monkeypatch, settings):
    # given: a PDF with a picture, and a database write that fails after the image was stored
    settings.RAG_OCR_ENABLED = False
    jpeg = encode(picture((300, 200)), "JPEG")
    pdf = build_pdf([[PdfText("Overview paragraph.", 72, 760, 12), PdfPicture(jpeg, 300, 200, 72, 400, 150, 100)]])
    [pk] = queued(kb, files(("picture.pdf", pdf)))
    real_bulk_create = Chunk.objects.bulk_create

    def failing_bulk_create(*args, **kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(Chunk.objects, "bulk_create", failing_bulk_create)

    # when
    with pytest.raises(RuntimeError):
        ingest_documents(document_ids=[pk])

    # then: no asset row, and no image file left behind by the rolled-back transaction
    monkeypatch.setattr(Chunk.objects, "bulk_create", real_bulk_create)
    assert not DocumentAsset.objects.filter(document_id=pk).exists()
    assets_dir = media_root / "kb" / str(kb.pk) / "assets"
    assert not assets_dir.exists() or not any(p.is_file() for p in assets_dir.rglob("*"))
    assert Document.objects.get(pk=pk).status == DocumentStatus.FAILED


def test_the_batches_are_enqueued_only_after_commit(kb, media_root, settings, database_tasks):
    # given
    from django.db import transaction
    from django_tasks_db.models import DBTaskResult

    settings.RAG_INGESTION_BATCH_DOCUMENTS = 2
    ids = [d.pk for d in (Document.objects.create(
        knowledge_base=kb, title=f"d{i}", original_name=f"d{i}.txt", file_type="txt", mime_type="text/plain",
        sha256=f"{i:064d}", size=10, status=DocumentStatus.UPLOADED) for i in range(3))]

    # when
    with transaction.atomic():
        queue_documents(document_ids=ids)
        before_commit = DBTaskResult.objects.count()

    # then
    batches = [row.args_kwargs["kwargs"]["document_ids"] for row in DBTaskResult.objects.order_by("enqueued_at", "id")]
    assert before_commit == 0
    assert batches == [ids[:2], ids[2:]]
