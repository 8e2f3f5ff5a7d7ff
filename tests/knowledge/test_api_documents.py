"""Uploading documents over the API: validation before storage, drafts, duplicates, deletion."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django_tasks.backends.dummy import DummyBackend
from django_tasks import default_task_backend

from knowledge.models import Document, DocumentStatus, KnowledgeBaseVersion, VersionStatus

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def clean_task_queue():
    backend = default_task_backend
    if isinstance(backend, DummyBackend):
        backend.clear()
    yield


def upload(client, kb, *files, **extra):
    return client.post(f"/api/knowledge-bases/{kb.slug}/documents/", {"files": list(files), **extra}, format="multipart")


def stored_files(media_root) -> list:
    return [p for p in media_root.rglob("*") if p.is_file()] if media_root.exists() else []


def test_upload_markdown_creates_draft_and_queues_ingestion(staff_api, kb, media_root, django_capture_on_commit_callbacks):
    # given
    handbook = SimpleUploadedFile("员工手册.md", "# 年假\n\n每年 15 天。".encode(), content_type="application/octet-stream")
    # when
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(staff_api, kb, handbook)
    # then
    assert response.status_code == 201, response.content
    body = response.json()[0]
    assert body["duplicate"] is False
    assert body["document"]["file_type"] == "md"
    assert body["document"]["status"] == "queued"
    assert body["document"]["title"] == "员工手册"
    draft = KnowledgeBaseVersion.objects.get(knowledge_base=kb)
    assert draft.status == VersionStatus.BUILDING
    assert list(draft.documents.values_list("pk", flat=True)) == [body["document"]["id"]]
    assert len(stored_files(media_root)) == 1
    queued = [r for r in default_task_backend.results if r.task.name == "ingest_documents_task"]
    assert [r.kwargs for r in queued] == [{"document_ids": [body["document"]["id"]]}]


def test_identical_bytes_are_detected(staff_api, kb, media_root):
    # given
    first = upload(staff_api, kb, SimpleUploadedFile("a.txt", "同样的内容".encode())).json()[0]
    # when
    second = upload(staff_api, kb, SimpleUploadedFile("b.txt", "同样的内容".encode())).json()[0]
    # then
    assert second["duplicate"] is True
    assert second["document"]["id"] == first["document"]["id"]
    assert Document.objects.count() == 1
    assert len(stored_files(media_root)) == 1


def _zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


BAD_UPLOADS = [
    ("empty.txt", b"", "empty_file"),
    ("fake.pdf", "这不是 PDF".encode(), "type_mismatch"),
    ("fake.docx", b"%PDF-1.7 not a docx", "type_mismatch"),
    ("binary.bin", bytes(range(256)) * 4, "unsupported_file_type"),
    ("program.exe", b"MZ\x90\x00\x03\x00\x00\x00" + b"\x00" * 100, "unsupported_file_type"),
    ("legacy.doc", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100, "unsupported_file_type"),
    ("archive.zip", _zip_bytes({"readme.txt": b"hello"}), "unsupported_file_type"),
    ("corrupt.docx", b"PK\x03\x04" + b"\x00" * 40, "corrupt_file"),
]


@pytest.mark.parametrize("name,data,code", BAD_UPLOADS, ids=[b[0] for b in BAD_UPLOADS])
def test_bad_uploads_are_refused_with_code_and_nothing_is_stored(staff_api, kb, media_root, name, data, code):
    # when
    response = upload(staff_api, kb, SimpleUploadedFile(name, data))
    # then
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code
    assert response.json()["detail"]
    assert response.json()["errors"][0]["file"] == name
    assert not Document.objects.exists()
    assert not KnowledgeBaseVersion.objects.exists()
    assert stored_files(media_root) == []


def test_oversize_upload_is_refused(staff_api, kb, media_root, settings):
    # given
    settings.RAG_MAX_UPLOAD_BYTES = 1024
    # when
    response = upload(staff_api, kb, SimpleUploadedFile("big.txt", "字".encode() * 1000))
    # then
    assert response.status_code == 400
    assert response.json()["code"] == "file_too_large"
    assert "MB" in response.json()["detail"]
    assert not Document.objects.exists()
    assert stored_files(media_root) == []


def test_zip_bomb_disguised_as_docx_is_refused(staff_api, kb, media_root, settings):
    # given: declared uncompressed size far beyond the limit
    settings.RAG_MAX_ARCHIVE_UNCOMPRESSED_BYTES = 1024 * 1024
    bomb = _zip_bytes({"word/document.xml": b"<w/>" + b" " * (2 * 1024 * 1024), "[Content_Types].xml": b"<x/>"})
    # when
    response = upload(staff_api, kb, SimpleUploadedFile("bomb.docx", bomb))
    # then
    assert response.status_code == 400
    assert response.json()["code"] == "archive_too_large"
    assert stored_files(media_root) == []


def test_one_bad_file_refuses_the_whole_batch(staff_api, kb, media_root):
    # when
    response = upload(
        staff_api, kb,
        SimpleUploadedFile("good.md", "# 标题\n内容".encode()),
        SimpleUploadedFile("empty.md", b""),
    )
    # then
    assert response.status_code == 400
    assert response.json()["code"] == "empty_file"
    assert [e["file"] for e in response.json()["errors"]] == ["empty.md"]
    assert not Document.objects.exists()
    assert stored_files(media_root) == []


def test_upload_without_files_is_refused(staff_api, kb):
    response = staff_api.post(f"/api/knowledge-bases/{kb.slug}/documents/", {}, format="multipart")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"


def test_text_type_from_bytes_not_name(staff_api, kb, media_root):
    # given: HTML bytes without an extension
    page = SimpleUploadedFile("notice", b"<!DOCTYPE html><html><body><p>\xe9\x80\x9a\xe7\x9f\xa5</p></body></html>")
    # when
    body = upload(staff_api, kb, page).json()[0]
    # then
    assert body["document"]["file_type"] == "html"


@pytest.mark.parametrize("name", ["   ", "  .md", "\u200b\ufeff.txt"])
def test_a_file_name_of_only_spaces_gives_a_title_a_reader_can_see(staff_api, kb, media_root, name):
    # when
    response = upload(staff_api, kb, SimpleUploadedFile(name, "请假流程：提前三天申请。".encode()))
    # then: not a title of blanks, which no list or citation could show
    assert response.status_code == 201, response.content
    assert response.json()[0]["document"]["title"] == "未命名文档"


def test_gb18030_text_is_accepted(staff_api, kb, media_root):
    body = upload(staff_api, kb, SimpleUploadedFile("通知.txt", "请假流程：提前三天申请。".encode("gb18030"))).json()[0]
    assert body["document"]["file_type"] == "txt"
    assert Document.objects.get().metadata["text_encoding"] == "gb18030"


def test_delete_draft_only_document_purges_it(staff_api, kb, media_root, django_capture_on_commit_callbacks, monkeypatch):
    # given
    from knowledge import cleanup

    deleted_vectors = []
    monkeypatch.setattr(cleanup, "delete_document_vectors", lambda **kw: deleted_vectors.append(kw["document_id"]))
    document_id = upload(staff_api, kb, SimpleUploadedFile("a.md", "# A\n内容".encode())).json()[0]["document"]["id"]
    # when
    with django_capture_on_commit_callbacks(execute=True):
        response = staff_api.delete(f"/api/knowledge-bases/{kb.slug}/documents/{document_id}/")
    # then
    assert response.status_code == 200
    assert response.json() == {"removed_from_draft": True, "purged": True, "retained_by_versions": []}
    assert not Document.objects.exists()
    assert stored_files(media_root) == []
    assert deleted_vectors == [document_id]


def test_delete_published_document_keeps_it_for_the_active_version(staff_api, kb_with_active_version):
    # given
    kb = kb_with_active_version
    document = kb.active_version.documents.get()
    # when
    response = staff_api.delete(f"/api/knowledge-bases/{kb.slug}/documents/{document.pk}/")
    # then
    assert response.json() == {"removed_from_draft": True, "purged": False, "retained_by_versions": [1]}
    draft = KnowledgeBaseVersion.objects.get(knowledge_base=kb, status=VersionStatus.BUILDING)
    assert not draft.documents.exists()
    assert kb.active_version.documents.filter(pk=document.pk).exists()


def test_retry_requires_failed_document(staff_api, kb):
    # given
    from tests.conftest import make_document

    ready = make_document(kb)
    failed = make_document(kb, status=DocumentStatus.FAILED)
    # when
    refused = staff_api.post(f"/api/knowledge-bases/{kb.slug}/documents/{ready.pk}/retry/")
    retried = staff_api.post(f"/api/knowledge-bases/{kb.slug}/documents/{failed.pk}/retry/")
    # then
    assert refused.status_code == 409
    assert refused.json()["code"] == "document_not_failed"
    assert retried.status_code == 200
    assert retried.json()["status"] == "queued"


def test_reuploading_a_failed_document_queues_it_again(staff_api, kb, media_root):
    # given
    first = upload(staff_api, kb, SimpleUploadedFile("a.txt", "内容".encode())).json()[0]["document"]
    Document.objects.filter(pk=first["id"]).update(status=DocumentStatus.FAILED, error_code="embedding_failed")
    # when
    again = upload(staff_api, kb, SimpleUploadedFile("a-again.txt", "内容".encode())).json()[0]
    # then
    assert again["duplicate"] is True
    assert again["document"]["status"] == "queued"
    assert again["document"]["error_code"] == ""


def test_consecutive_uploads_accumulate_when_the_first_batch_is_ready_but_unpublished(staff_api, kb, media_root):
    # given: the first batch finished (its draft became READY) but nobody published it
    first = upload(staff_api, kb, SimpleUploadedFile("a.md", "# 甲\n内容".encode())).json()[0]["document"]
    Document.objects.filter(pk=first["id"]).update(status=DocumentStatus.READY)
    from knowledge.catalog import readiness

    readiness.refresh_version_readiness(version_ids=list(KnowledgeBaseVersion.objects.values_list("pk", flat=True)))
    assert KnowledgeBaseVersion.objects.get(knowledge_base=kb).status == VersionStatus.READY
    # when
    second = upload(staff_api, kb, SimpleUploadedFile("b.md", "# 乙\n内容".encode())).json()[0]["document"]
    # then: the new draft holds both, so publishing it cannot drop the first batch
    draft = KnowledgeBaseVersion.objects.get(knowledge_base=kb, status=VersionStatus.BUILDING)
    assert set(draft.documents.values_list("pk", flat=True)) == {first["id"], second["id"]}


def test_reuploading_a_ready_document_does_not_queue_it_again(staff_api, kb, media_root):
    first = upload(staff_api, kb, SimpleUploadedFile("a.txt", "内容".encode())).json()[0]["document"]
    Document.objects.filter(pk=first["id"]).update(status=DocumentStatus.READY)
    again = upload(staff_api, kb, SimpleUploadedFile("a.txt", "内容".encode())).json()[0]
    assert again["duplicate"] is True and again["document"]["status"] == "ready"


def test_status_filter_and_unknown_status(staff_api, kb):
    from tests.conftest import make_document

    failed = make_document(kb, status=DocumentStatus.FAILED)
    make_document(kb)
    listed = staff_api.get(f"/api/knowledge-bases/{kb.slug}/documents/?status=failed").json()["results"]
    assert [d["id"] for d in listed] == [failed.pk]
    bad = staff_api.get(f"/api/knowledge-bases/{kb.slug}/documents/?status=broken")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_status"


def test_too_many_files_and_mixed_errors(staff_api, kb, media_root, settings):
    settings.RAG_MAX_FILES_PER_UPLOAD = 2
    many = upload(staff_api, kb, *[SimpleUploadedFile(f"{i}.md", f"# {i}".encode()) for i in range(3)])
    assert many.status_code == 400 and many.json()["code"] == "too_many_files"
    mixed = upload(staff_api, kb, SimpleUploadedFile("e.md", b""), SimpleUploadedFile("f.pdf", b"nope"))
    assert mixed.status_code == 400 and mixed.json()["code"] == "invalid_files"
    assert {e["code"] for e in mixed.json()["errors"]} == {"empty_file", "type_mismatch"}
    assert stored_files(media_root) == []


def test_a_failure_while_registering_removes_the_stored_bytes(staff_api, kb, media_root, monkeypatch):
    # given: the database write fails after the bytes were stored
    from knowledge.documents import services as document_services

    def broken(**kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(document_services, "_register_uploads", broken)
    # when
    with pytest.raises(RuntimeError):
        document_services.upload_documents(kb=kb, files=[SimpleUploadedFile("a.md", "# 甲".encode())], actor=None)
    # then
    assert stored_files(media_root) == []


def test_document_list_comes_in_pages(staff_api, kb):
    from tests.conftest import make_document

    # given: three documents, newest first in the list
    oldest, middle, newest = (make_document(kb) for _ in range(3))
    base = f"/api/knowledge-bases/{kb.slug}/documents/"
    # when
    first = staff_api.get(base, {"limit": 2}).json()
    second = staff_api.get(first["next"]).json()
    # then
    assert first["count"] == second["count"] == 3
    assert [d["id"] for d in first["results"]] == [newest.pk, middle.pk]
    assert first["previous"] is None
    assert [d["id"] for d in second["results"]] == [oldest.pk]
    assert second["next"] is None and second["previous"] is not None



def test_page_bounds_beyond_the_database_integer_range_are_clamped(staff_api, kb):
    from tests.conftest import make_document

    # given
    document = make_document(kb)
    base = f"/api/knowledge-bases/{kb.slug}/documents/"
    # when: values a 64-bit OFFSET / LIMIT cannot hold (these were a 500)
    far = staff_api.get(base, {"limit": 10**25, "offset": 10**25})
    huge_limit = staff_api.get(base, {"limit": 10**25})
    # then
    assert far.status_code == 200 and far.json()["results"] == [] and far.json()["count"] == 1
    assert huge_limit.status_code == 200 and [d["id"] for d in huge_limit.json()["results"]] == [document.pk]


def test_an_upload_that_is_not_multipart_is_refused_with_415(staff_api, kb):
    # when: a JSON array instead of a form (was a 500: the view read it as a form)
    response = staff_api.post(f"/api/knowledge-bases/{kb.slug}/documents/", [1, 2], format="json")
    # then
    assert response.status_code == 415 and response.json()["code"] == "unsupported_media_type"
