"""Parsing runs in a child process: a file that crashes a parsing library fails alone, a parse
whose OCR runs out of time is retried rather than called empty, and the worker goes on."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from engines.sandbox import Sandbox
from knowledge.documents import services as document_services
from knowledge.documents.ingestion.tasks import ingest_documents
from knowledge.models import Document, DocumentStatus
from docparse import isolated
from tests.conftest import make_kb
from tests.fakes.aborting_parser import ABORT_MARKER
from tests.docparse.factories import PdfPicture, PdfText, build_pdf, encode, text_image

pytestmark = pytest.mark.django_db(transaction=True)


def upload(kb, name: str, data: bytes) -> Document:
    return document_services.upload_documents(kb=kb, files=[SimpleUploadedFile(name, data)], actor=None)[0].document


def scanned_pdf() -> bytes:
    scan = text_image(["INVOICE 2024", "TOTAL 12345"], size=(1190, 1684), font_size=72)
    return build_pdf([[PdfPicture(encode(scan, "JPEG"), 1190, 1684, 0, 0, 595, 842)]])


@pytest.fixture
def crashing_parser():
    """The parse sandbox behind a handler that aborts on `ABORT_MARKER` (crash injection)."""
    real = isolated._sandbox
    isolated._sandbox = Sandbox(name="parser", handler_module="tests.fakes.aborting_parser")
    yield isolated._sandbox
    isolated._sandbox.close()
    isolated._sandbox = real


def test_a_file_that_crashes_the_parser_fails_alone_and_the_batch_goes_on(milvus, media_root, crashing_parser):
    # given: three queued documents, the middle one crashes the parsing library
    kb = make_kb()
    before = upload(kb, "前.md", "# 前\n\n年假按工龄计算，满一年五天。".encode())
    poison = upload(kb, "坏.txt", b"some text " + ABORT_MARKER + b" more text")
    after = upload(kb, "后.md", "# 后\n\nVPN 空闲三十分钟自动断开。".encode())

    # when: one run takes all three
    reports = ingest_documents(document_ids=[before.pk, poison.pk, after.pk])

    # then: the culprit FAILED with a code of its own, its neighbours READY, this process alive
    assert [r.status for r in reports] == [DocumentStatus.READY, DocumentStatus.FAILED, DocumentStatus.READY]
    poison.refresh_from_db()
    assert poison.error_code == "parser_crashed"
    assert "异常退出" in poison.error_message and "SIGABRT" in poison.error_message
    assert poison.attempts == 1  # not retried into the next run
    assert crashing_parser.starts == 2


def test_a_scanned_pdf_whose_ocr_runs_out_of_time_is_retried_then_fails_saying_so(milvus, media_root, settings):
    # given: a budget no OCR can meet, two runs per document
    settings.RAG_OCR_SECONDS_PER_PAGE = 0.001
    settings.RAG_INGESTION_MAX_ATTEMPTS = 2
    kb = make_kb()
    document = upload(kb, "扫描件.pdf", scanned_pdf())

    # when: the first run
    (first,) = ingest_documents(document_ids=[document.pk])

    # then: a timeout is transient, not "no text"
    document.refresh_from_db()
    assert first.status == "retry_scheduled" and first.error_code == "ocr_timeout"
    assert document.status == DocumentStatus.QUEUED
    assert "超时" in document.error_message and "没有可提取的文字" not in document.error_message

    # when: the last run times out too
    (last,) = ingest_documents(document_ids=[document.pk])

    # then: FAILED, saying it timed out
    document.refresh_from_db()
    assert last.status == DocumentStatus.FAILED
    assert document.status == DocumentStatus.FAILED and document.error_code == "ocr_timeout"
    assert "超时" in document.error_message

    # when: retried on a quiet machine (a budget OCR meets)
    settings.RAG_OCR_SECONDS_PER_PAGE = 60
    document_services.retry_document(document=document, actor=None)
    (again,) = ingest_documents(document_ids=[document.pk])

    # then: the text is there
    assert again.status == DocumentStatus.READY, again.error_message


def test_a_partly_read_scan_is_retried_and_the_last_run_keeps_what_it_read(milvus, media_root, settings):
    # given: a text page and a scanned page, a budget OCR cannot meet, two runs per document
    settings.RAG_OCR_SECONDS_PER_PAGE = 0.001
    settings.RAG_INGESTION_MAX_ATTEMPTS = 2
    scan = text_image(["INVOICE 2024"], size=(600, 800))
    data = build_pdf([[PdfText("Cover page with text.", 72, 760, 12)], [PdfPicture(encode(scan, "JPEG"), 600, 800, 0, 0, 595, 842)]])
    kb = make_kb()
    document = upload(kb, "半扫描.pdf", data)

    # when
    (first,) = ingest_documents(document_ids=[document.pk])
    (last,) = ingest_documents(document_ids=[document.pk])

    # then: retried once for the unread page, then indexed with what was read, saying so
    assert first.status == "retry_scheduled" and first.error_code == "ocr_timeout"
    assert last.status == DocumentStatus.READY
    document.refresh_from_db()
    assert any("第 2 页" in warning and "超时" in warning for warning in document.metadata["warnings"])
