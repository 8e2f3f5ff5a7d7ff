"""Purges racing uploads of the same bytes and retirement racing a duplicate upload."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, transaction

from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.models import Document, KnowledgeBase, KnowledgeBaseVersion
from tests.conftest import make_document, make_kb, make_ready_version

BYTES = "# 年假\n\n入职满一年的员工每年享有 15 天带薪年假。".encode()


def upload(kb):
    return document_services.upload_documents(kb=kb, files=[SimpleUploadedFile("a.md", BYTES)], actor=None)[0].document


@pytest.mark.django_db
def test_a_purge_keeps_the_file_when_the_same_bytes_were_uploaded_again_meanwhile(
    media_root, django_capture_on_commit_callbacks, monkeypatch
):
    # given: a draft-only document is deleted; its purge runs after commit
    from knowledge import cleanup

    monkeypatch.setattr(cleanup, "delete_document_vectors", lambda **kw: None)
    kb = make_kb()
    first = upload(kb)
    key = first.file.name
    with django_capture_on_commit_callbacks(execute=False) as purges:
        catalog_services.delete_document(document=first, actor=None)

    # when: the same bytes come back (same content address) before the purge runs
    again = upload(kb)
    for purge in purges:
        purge()

    # then
    assert again.file.name == key
    assert Document._meta.get_field("file").storage.exists(key)


@pytest.mark.django_db
def test_an_upload_stores_its_bytes_again_when_a_purge_removed_them_before_it_registered(media_root, monkeypatch):
    # given: the bytes are already stored (an earlier document's), and the shared file
    # disappears between finding it and registering (a purge in between)
    kb = make_kb()
    Document._meta.get_field("file").storage.save(
        document_services._storage_key(kb, hashlib.sha256(BYTES).hexdigest()), SimpleUploadedFile("x", BYTES)
    )
    storage = Document._meta.get_field("file").storage
    real_register = document_services._register_uploads

    def purge_then_register(**kwargs):
        for key in kwargs["stored_keys"]:
            storage.delete(key)
        return real_register(**kwargs)

    monkeypatch.setattr(document_services, "_register_uploads", purge_then_register)

    # when
    document = upload(kb)

    # then
    assert storage.exists(document.file.name)
    with storage.open(document.file.name) as stored:
        assert stored.read() == BYTES


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif("connection.vendor == 'sqlite'", reason="parallel writers need PostgreSQL")
def test_retiring_a_version_waits_for_a_duplicate_upload_adding_its_document_to_the_draft(media_root, staff_user):
    # given: document A is held only by v1 (ready, not active); v2 is active; v3 is the draft
    kb = make_kb()
    a, b = make_document(kb), make_document(kb)
    v1 = make_ready_version(kb, documents=[a])
    v2 = make_ready_version(kb, documents=[b])
    catalog_services.activate_version(version=v2, actor=staff_user)
    v3 = catalog_services.create_draft_version(kb=kb, actor=staff_user)
    locked = threading.Event()
    failures: list[BaseException] = []

    def duplicate_upload() -> None:
        # what `_register_uploads` does with the same bytes again: under the KB lock, add A
        try:
            with transaction.atomic():
                KnowledgeBase.objects.select_for_update().get(pk=kb.pk)
                locked.set()
                time.sleep(0.5)
                KnowledgeBaseVersion.objects.get(pk=v3.pk).documents.add(a)
        except BaseException as exc:  # the assertion below reports it
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=duplicate_upload)
    thread.start()
    assert locked.wait(timeout=10)

    # when
    catalog_services.retire_version(version=v1, actor=staff_user)
    thread.join(timeout=10)

    # then: the retirement waited; A lives on in the draft
    assert failures == []
    assert Document.objects.filter(pk=a.pk).exists()
    assert KnowledgeBaseVersion.objects.get(pk=v3.pk).documents.filter(pk=a.pk).exists()
