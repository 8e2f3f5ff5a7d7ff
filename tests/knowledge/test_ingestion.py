"""Ingestion end to end on real components: parsers, local embedder, Milvus Lite, the database."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import openpyxl
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone
from django_eventstream.models import Event

from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.documents.ingestion.queue import requeue_stale_documents
from knowledge.documents.ingestion.tasks import ingest_document
from knowledge.models import (
    Chunk,
    Document,
    DocumentStatus,
    KnowledgeBase,
    KnowledgeBaseVersion,
    VersionStatus,
)
from knowledge.vectors import store_for
from engines.ports import DocumentFilter
from tests.docparse.factories import PdfText, build_pdf, zip_bomb

pytestmark = pytest.mark.django_db(transaction=True)

HANDBOOK = """# 员工手册

## 年假

入职满一年的员工每年享有 15 天带薪年假。年假需提前三个工作日在 OA 系统申请。

## 差旅标准

| 城市级别 | 住宿标准 |
| --- | --- |
| 一线城市 | 600元/晚 |
| 其他城市 | 400元/晚 |
"""


def upload(kb, name: str, data: bytes, staff_user=None):
    return document_services.upload_documents(kb=kb, files=[SimpleUploadedFile(name, data)], actor=staff_user)[0].document


def stored_payload(event: Event) -> dict:
    """django-eventstream stores the SSE data (a JSON string) JSON-encoded once more."""
    return json.loads(json.loads(event.data))


def sparse_ids(kb, query: str) -> set[int]:
    hits = store_for(kb).search_sparse(kb_id=kb.pk, query=query, limit=20, documents=DocumentFilter(exclude=()))
    return {hit.document_id for hit in hits}


@pytest.fixture
def kb(db):
    from tests.conftest import make_kb

    return make_kb()


def test_markdown_document_becomes_ready_with_chunks_vectors_and_a_ready_version(kb, milvus, run_tasks, media_root):
    # when: the upload commits and the task runs (inline worker)
    document = upload(kb, "员工手册.md", HANDBOOK.encode())
    # then
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY, document.error_message
    chunks = list(Chunk.objects.filter(document=document).order_by("ordinal"))
    assert len(chunks) == document.chunk_count >= 2
    assert any(c.heading_path[-1:] == ["年假"] and "15 天" in c.content for c in chunks)
    table = next(c for c in chunks if c.content_type == "table")
    assert "| 城市级别 | 住宿标准 |" in table.content and "600元/晚" in table.content
    assert len({c.parent_id for c in chunks}) >= 2
    assert sparse_ids(kb, "年假") == {document.pk}
    version = KnowledgeBaseVersion.objects.get(knowledge_base=kb)
    assert version.status == VersionStatus.READY
    assert set(document.metadata["stage_seconds"]) >= {"parse", "chunk", "embed", "upsert"}


def test_progress_events_are_published_for_each_status(kb, milvus, run_tasks, media_root):
    # when
    document = upload(kb, "a.md", "# 标题\n\n内容。".encode())
    # then
    payloads = [stored_payload(e) for e in Event.objects.filter(channel=f"kb-{kb.pk}", type="documents").order_by("id")]
    items = [item for p in payloads for item in p["documents"] if item["document"] == document.pk]
    statuses = [item["status"] for item in items]
    assert [s for i, s in enumerate(statuses) if i == 0 or s != statuses[i - 1]] == ["parsing", "indexing", "ready"]
    # a one-chunk document embeds within one progress interval: no progress event, the count with READY
    assert not any("embedded_chunks" in item for item in items)
    document.refresh_from_db()
    assert (document.embedded_chunks, document.chunks_to_embed) == (1, 1)
    assert Event.objects.filter(channel=f"kb-{kb.pk}", type="version").exists()


def test_a_large_document_shows_its_embedding_progress_while_it_indexes(kb, milvus, run_tasks, media_root, settings, monkeypatch):
    # given: a document of about a hundred chunks, embedded eight at a time, progress stored on every call
    from knowledge.documents.ingestion import runner
    from engines.providers import get_embedder

    settings.RAG_INGESTION_PROGRESS_SECONDS = 0
    monkeypatch.setattr(runner, "EMBED_BATCH", 8)
    seen: list[tuple[str, int, int, str]] = []

    class Watching:
        """The knowledge base's own embedder; before each call, what a reader of the row sees."""

        def __init__(self, inner):
            self._inner = inner
            self.model, self.dimension = inner.model, inner.dimension

        def embed_documents(self, texts):
            row = Document.objects.get(title="大文件")
            seen.append((row.status, row.embedded_chunks, row.chunks_to_embed, row.embedding_progress()))
            return self._inner.embed_documents(texts)

    monkeypatch.setattr(runner, "get_embedder", lambda model, dimension: Watching(get_embedder(model, dimension)))
    body = "\n\n".join(f"## 第 {i} 节\n\n" + f"第 {i} 节的规定：报销须在发生后 {i} 日内提交。" * 12 for i in range(100))

    # when
    document = upload(kb, "大文件.md", body.encode())

    # then: every call saw the count so far of one fixed total, rising by a batch each time
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY, document.error_message
    total = document.chunk_count
    assert total > 50
    assert [status for status, *_rest in seen] == ["indexing"] * len(seen)
    assert [done for _s, done, _t, _l in seen] == list(range(0, total, 8))
    assert {t for _s, _d, t, _l in seen} == {total}
    assert seen[1][3] == f"已向量化 8 / {total}"
    assert (document.embedded_chunks, document.chunks_to_embed) == (total, total)
    assert document.embedding_progress() == ""  # READY: the plain chunk count again


def test_reingesting_is_idempotent(kb, milvus, run_tasks, media_root):
    # given
    document = upload(kb, "a.md", HANDBOOK.encode())
    first_ids = set(Chunk.objects.filter(document=document).values_list("pk", flat=True))
    # when: the same document is processed again
    Document.objects.filter(pk=document.pk).update(status=DocumentStatus.QUEUED)
    report = ingest_document(document_id=document.pk)
    # then
    assert report.status == DocumentStatus.READY
    second_ids = set(Chunk.objects.filter(document=document).values_list("pk", flat=True))
    assert len(second_ids) == len(first_ids)
    hits = store_for(kb).search_sparse(kb_id=kb.pk, query="年假", limit=50, documents=DocumentFilter(exclude=()))
    expected = set(Chunk.objects.filter(document=document, content__contains="年假").values_list("pk", flat=True))
    assert expected and {h.id for h in hits} == expected  # new vectors written, old ones gone


def test_a_claimed_document_is_not_processed_twice(kb, milvus, media_root):
    # given: a worker already moved it to PARSING
    document = upload(kb, "a.md", HANDBOOK.encode())
    Document.objects.filter(pk=document.pk).update(status=DocumentStatus.PARSING)
    # when
    report = ingest_document(document_id=document.pk)
    # then
    assert report.status == DocumentStatus.PARSING
    assert not Chunk.objects.filter(document=document).exists()


def test_stuck_jobs_are_requeued_at_worker_start(kb, milvus, media_root, database_tasks):
    # given: a job died mid-parse an hour ago, another is fresh
    stale = upload(kb, "stale.md", HANDBOOK.encode())
    fresh = upload(kb, "fresh.md", "# 新\n\n新的内容。".encode())
    Document.objects.filter(pk=stale.pk).update(status=DocumentStatus.PARSING, status_changed_at=timezone.now() - timedelta(hours=1))
    Document.objects.filter(pk=fresh.pk).update(status=DocumentStatus.INDEXING, status_changed_at=timezone.now())
    # when
    requeued = requeue_stale_documents()
    # then
    assert requeued == [stale.pk]
    stale.refresh_from_db()
    assert stale.status == DocumentStatus.QUEUED
    from knowledge.documents.bulk import process_queue_until_done

    process_queue_until_done([stale.pk], timeout=120)
    stale.refresh_from_db()
    assert stale.status == DocumentStatus.READY


def _xlsx(rows: int) -> bytes:
    workbook = openpyxl.Workbook(write_only=True)
    sheet = workbook.create_sheet("数据")
    sheet.append(["编号", "名称", "数量"])
    for i in range(rows):
        sheet.append([i, f"物料{i}", i % 7])
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


BAD_DOCUMENTS = {
    "encrypted": ("secret.pdf", lambda: build_pdf([[PdfText("secret", 72, 700)]], encrypted=True), "pdf_encrypted"),
    "truncated": ("cut.pdf", lambda: build_pdf([[PdfText("hello world " * 20, 72, 700)]])[:-200], "pdf_corrupt"),
    "no_text": ("blank.md", lambda: "\n\n   \n".encode(), "no_text"),
    "too_many_rows": ("big.xlsx", lambda: _xlsx(3_000), "too_many_rows"),
}


@pytest.mark.parametrize("case", list(BAD_DOCUMENTS))
def test_bad_documents_fail_cleanly_and_touch_nothing_else(case, kb, milvus, run_tasks, media_root, settings, staff_user):
    # given: a published version with a good document
    settings.RAG_MAX_SHEET_ROWS = 1_000
    good = upload(kb, "good.md", HANDBOOK.encode())
    version = KnowledgeBaseVersion.objects.get(knowledge_base=kb)
    catalog_services.activate_version(version=version, actor=staff_user)
    vectors_before = sparse_ids(kb, "年假")
    name, build, code = BAD_DOCUMENTS[case]
    # when
    bad = upload(kb, name, build())
    # then
    bad.refresh_from_db()
    assert bad.status == DocumentStatus.FAILED
    assert bad.error_code == code
    assert bad.error_message and "Traceback" not in bad.error_message
    assert not Chunk.objects.filter(document=bad).exists()
    good.refresh_from_db()
    assert good.status == DocumentStatus.READY
    kb.refresh_from_db()
    assert kb.active_version == version
    assert sparse_ids(kb, "年假") == vectors_before
    draft = KnowledgeBaseVersion.objects.get(knowledge_base=kb, status=VersionStatus.BUILDING)
    assert draft.documents.filter(pk=bad.pk).exists()  # stays visible in the draft, which cannot be published


def test_zip_bomb_that_lies_about_its_size_fails_at_parse(kb, milvus, run_tasks, media_root, settings):
    # given: declared sizes pass the upload check (limit raised), the parser's own bound catches it
    settings.RAG_MAX_ARCHIVE_UNCOMPRESSED_BYTES = 1024 * 1024 * 1024
    settings.RAG_MAX_ARCHIVE_RATIO = 10_000_000
    bomb = zip_bomb(["[Content_Types].xml", "xl/workbook.xml"], bomb_name="xl/worksheets/sheet1.xml", bomb_bytes=150 * 1024 * 1024)
    settings.RAG_PARSE_MAX_MEMBER_BYTES = 50 * 1024 * 1024
    # when
    document = upload(kb, "bomb.xlsx", bomb)
    # then
    document.refresh_from_db()
    assert document.status == DocumentStatus.FAILED
    assert document.error_code == "archive_too_large"


def test_embedding_space_mismatch_is_refused(kb, milvus, run_tasks, media_root):
    # given: the KB was built with a remote model the current (local) provider cannot serve
    KnowledgeBase.objects.filter(pk=kb.pk).update(embedding_model="text-embedding-v4", embedding_dimension=1024)
    kb.refresh_from_db()
    # when
    document = upload(kb, "a.md", HANDBOOK.encode())
    # then
    document.refresh_from_db()
    assert document.status == DocumentStatus.FAILED
    assert document.error_code == "embedding_mismatch"
    assert "text-embedding-v4" in document.error_message


def test_deleting_a_draft_document_removes_its_vectors(kb, milvus, run_tasks, media_root, staff_user):
    # given: the draft stays BUILDING (one of its documents failed), so only it holds the document
    document = document_services.upload_documents(
        kb=kb, actor=staff_user,
        files=[SimpleUploadedFile("a.md", HANDBOOK.encode()), SimpleUploadedFile("blank.md", b"\n\n")],
    )[0].document
    assert KnowledgeBaseVersion.objects.get(knowledge_base=kb).status == VersionStatus.BUILDING
    assert sparse_ids(kb, "年假") == {document.pk}
    # when
    outcome = catalog_services.delete_document(document=document, actor=staff_user)
    # then
    assert outcome.purged
    assert sparse_ids(kb, "年假") == set()
    assert not Chunk.objects.exists()


def test_retiring_the_last_version_holding_a_document_purges_it(kb, milvus, run_tasks, media_root, staff_user):
    # given: v1 (READY, never published) is the only version holding the document
    document = upload(kb, "a.md", HANDBOOK.encode())
    version = KnowledgeBaseVersion.objects.get(knowledge_base=kb)
    outcome = catalog_services.delete_document(document=document, actor=staff_user)
    assert not outcome.purged and outcome.retained_by == (1,)
    assert sparse_ids(kb, "年假") == {document.pk}
    # when
    catalog_services.retire_version(version=version, actor=staff_user)
    # then
    assert not Document.objects.filter(pk=document.pk).exists()
    assert sparse_ids(kb, "年假") == set()


def test_vector_store_down_fails_the_document_with_a_clear_message(kb, settings, run_tasks, media_root):
    # given: nothing listens on this port
    from engines.milvus_store import reset_vector_store_cache

    settings.MILVUS_URI = "http://127.0.0.1:9"
    reset_vector_store_cache()
    # when
    document = upload(kb, "a.md", HANDBOOK.encode())
    # then
    document.refresh_from_db()
    reset_vector_store_cache()
    assert document.status == DocumentStatus.FAILED
    assert document.error_code == "vector_store_unavailable"
    assert "向量库" in document.error_message
    assert not Chunk.objects.filter(document=document).exists()


def test_retry_after_failure_succeeds(kb, milvus, run_tasks, media_root, settings, staff_user):
    # given: a document failed because the vector store was down
    from engines.milvus_store import reset_vector_store_cache

    real_uri = settings.MILVUS_URI
    settings.MILVUS_URI = "http://127.0.0.1:9"
    reset_vector_store_cache()
    document = upload(kb, "a.md", HANDBOOK.encode())
    document.refresh_from_db()
    assert document.status == DocumentStatus.FAILED
    assert document.attempts == settings.RAG_INGESTION_MAX_ATTEMPTS  # retried as transient first
    # when: it is back and staff retry
    settings.MILVUS_URI = real_uri
    reset_vector_store_cache()
    document_services.retry_document(document=document, actor=staff_user)
    # then
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY
    assert document.attempts == 1  # a manual retry gives the attempts back
    assert sparse_ids(kb, "年假") == {document.pk}


def test_images_are_captioned_offline_when_no_vision_model_is_configured(kb, milvus, run_tasks, media_root, settings, tmp_path):
    # given: a remote provider without a vision model; the KB's embeddings are local
    from demo.build import build_demo_corpus
    from knowledge.models import DocumentAsset
    settings.RAG_PROVIDER = "openai"
    settings.OPENAI_BASE_URL = ""
    manual = next(p for p in build_demo_corpus(tmp_path) if p.name == "product_manual.pdf")
    # when
    document = upload(kb, manual.name, manual.read_bytes())
    # then
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY, document.error_message
    assert DocumentAsset.objects.get(document=document).caption.startswith("图片")


def test_purging_one_document_keeps_an_image_another_document_shares(kb, milvus, run_tasks, media_root, staff_user, tmp_path):
    # given: two documents (different bytes) that embed the same picture → one stored asset file
    from demo.build import build_demo_corpus
    from knowledge.models import DocumentAsset

    manual = next(p for p in build_demo_corpus(tmp_path) if p.name == "product_manual.pdf").read_bytes()
    first, second = (
        o.document for o in document_services.upload_documents(
            kb=kb, actor=staff_user,
            files=[SimpleUploadedFile("a.pdf", manual), SimpleUploadedFile("b.pdf", manual + b"\n% copy\n")],
        )
    )
    shared = {a.file.name for a in DocumentAsset.objects.all()}
    assert len(shared) == 1 and DocumentAsset.objects.count() == 2
    version = KnowledgeBaseVersion.objects.get(knowledge_base=kb)
    # when: the first document is deleted and its only version retired
    catalog_services.delete_document(document=first, actor=staff_user)
    catalog_services.retire_version(version=version, actor=staff_user)
    # then: the second document's image is still there
    assert not Document.objects.filter(pk=first.pk).exists()
    asset = DocumentAsset.objects.get(document=second)
    assert asset.file.storage.exists(asset.file.name)


def _docx_titled(title: str) -> bytes:
    from docx import Document as DocxDocument

    doc = DocxDocument()
    doc.core_properties.title = title
    doc.add_heading("年假", level=1)
    doc.add_paragraph("入职满一年的员工每年享有 15 天带薪年假。")
    buffer = io.BytesIO()
    doc.save(buffer)
    return buffer.getvalue()


def test_a_documents_own_title_replaces_the_file_name(kb, milvus, run_tasks, media_root):
    # when: a DOCX whose title property is set, uploaded as "v3_final(1).docx"
    document = upload(kb, "v3_final(1).docx", _docx_titled("员工休假管理办法"))

    # then
    document.refresh_from_db()
    assert document.status == DocumentStatus.READY
    assert document.title == "员工休假管理办法"


def test_a_title_given_at_upload_is_kept(kb, milvus, run_tasks, media_root):
    # when
    document = document_services.upload_documents(
        kb=kb, files=[SimpleUploadedFile("a.docx", _docx_titled("文件里的标题"))], actor=None, titles=["编辑定的标题"]
    )[0].document

    # then
    document.refresh_from_db()
    assert document.title == "编辑定的标题"
