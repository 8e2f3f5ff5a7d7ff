"""`GET /api/chunks/{id}/preview`: real PDFs through the real pipeline, PDFium renders, storage."""

from __future__ import annotations

import io

import pypdfium2 as pdfium
import pytest
from django.core.cache import cache
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from PIL import Image

from knowledge import epochs, previews
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.models import Chunk, Document, KnowledgeBaseVersion, Visibility
from tests.conftest import make_kb
from tests.docparse.factories import PdfText, build_pdf
from tests.knowledge.test_s3_storage import keys, s3_endpoint, s3_storage  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WHITE = (255, 255, 255)

WARRANTY_PDF = build_pdf([[
    PdfText("产品保修说明", 72, 760, 20),
    PdfText("星河X3 路由器的保修期为 24 个月，保修期内免费维修。", 72, 720, 12),
    PdfText("Warranty: 24 months from the date of purchase.", 72, 704, 12),
]])
HANDBOOK_MD = "# 员工手册\n\n## 年假\n\n入职满一年的员工每年享有 15 天带薪年假。\n"


def upload(kb, actor, *files: tuple[str, bytes]) -> list[Document]:
    outcomes = document_services.upload_documents(
        kb=kb, actor=actor, files=[SimpleUploadedFile(name, data) for name, data in files]
    )
    return [outcome.document for outcome in outcomes]


@pytest.fixture
def published_kb(milvus, run_tasks, media_root, staff_user):
    """An internal KB whose active version holds a PDF (保修说明) and a Markdown handbook."""
    kb = make_kb(visibility=Visibility.INTERNAL)
    upload(kb, staff_user, ("保修说明.pdf", WARRANTY_PDF), ("员工手册.md", HANDBOOK_MD.encode()))
    version = KnowledgeBaseVersion.objects.get(knowledge_base=kb)
    assert version.status == "ready"
    catalog_services.activate_version(version=version, actor=staff_user)
    kb.refresh_from_db()
    cache.clear()
    epochs.l1_epochs.clear()
    return kb


def pdf_chunk(kb) -> Chunk:
    return Chunk.objects.get(document__knowledge_base=kb, document__file_type="pdf", content__contains="保修期")


def preview(client, chunk_id: int, **extra):
    return client.get(reverse("chunk-preview", args=[chunk_id]), **extra)


def stored_previews(document: Document) -> list[str]:
    folder = previews.preview_folder(kb_id=document.knowledge_base_id, document_id=document.pk)
    try:
        return default_storage.listdir(folder)[1]
    except FileNotFoundError:
        return []


def test_preview_is_a_png_of_the_chunk_region_with_its_lines_highlighted(member_api, published_kb):
    # given: a chunk whose bboxes come from the PDF parser
    chunk = pdf_chunk(published_kb)
    boxes = previews.usable_boxes(chunk.bboxes)
    assert boxes and {box[0] for box in boxes} == {1}
    # when
    response = preview(member_api, chunk.pk)
    # then
    assert response.status_code == 200
    assert response["Content-Type"] == "image/png"
    assert response["Cache-Control"] == "private, max-age=3600"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response.content.startswith(PNG_SIGNATURE)
    image = Image.open(io.BytesIO(response.content)).convert("RGB")
    left, top = min(b[1] for b in boxes), min(b[2] for b in boxes)
    right, bottom = max(b[3] for b in boxes), max(b[4] for b in boxes)
    margin, scale = previews.MARGIN_PT, previews.SCALE
    assert abs(image.width - (right - left + 2 * margin) * scale) <= 2
    assert abs(image.height - (bottom - top + 2 * margin) * scale) <= 2
    # the margin is the page's own white, the chunk's lines are tinted yellow
    assert image.getpixel((2, 2)) == WHITE
    _page, x0, y0, x1, y1 = boxes[0]
    inside = image.crop((
        round((x0 - left + margin) * scale), round((y0 - top + margin) * scale),
        round((x1 - left + margin) * scale), round((y1 - top + margin) * scale),
    ))
    _count, (red, green, blue) = max(inside.getcolors(maxcolors=1 << 16))
    assert red > 240 and green > 220 and blue < 215  # white under a translucent yellow


def test_second_request_is_served_from_the_stored_preview(member_api, published_kb, monkeypatch):
    # given
    chunk = pdf_chunk(published_kb)
    renders = []
    real_render = previews.render_pdf_region
    monkeypatch.setattr(previews, "render_pdf_region", lambda *a: renders.append(a) or real_render(*a))
    first = preview(member_api, chunk.pk)
    # when
    second = preview(member_api, chunk.pk)
    # then
    assert first.status_code == second.status_code == 200
    assert len(renders) == 1
    assert second.content == first.content
    assert default_storage.exists(previews.preview_key(chunk))
    assert stored_previews(chunk.document) == [previews.preview_key(chunk).rsplit("/", 1)[1]]


def test_a_concurrent_double_render_leaves_one_stored_preview(member_api, published_kb, monkeypatch):
    # given: two requests that both missed the store (as if they ran at the same moment)
    chunk = pdf_chunk(published_kb)
    monkeypatch.setattr(previews, "_read_stored", lambda key: None)
    # when
    first = preview(member_api, chunk.pk)
    second = preview(member_api, chunk.pk)
    # then
    assert first.content == second.content
    assert len(stored_previews(chunk.document)) == 1
    with default_storage.open(previews.preview_key(chunk), "rb") as handle:
        assert handle.read() == first.content


def test_anonymous_reader_of_an_internal_kb_gets_not_found(anonymous_api, published_kb):
    # given
    chunk = pdf_chunk(published_kb)
    # when
    response = preview(anonymous_api, chunk.pk)
    # then
    assert response.status_code == 404
    assert response.json()["code"] == "chunk_not_found"


def test_unknown_chunk_is_not_found(member_api, published_kb):
    response = preview(member_api, 999999)
    assert response.status_code == 404
    assert response.json()["code"] == "chunk_not_found"


def test_draft_only_document_is_previewed_by_staff_only(member_api, staff_api, published_kb, staff_user):
    # given: a second PDF, ready in the draft but not published
    draft_pdf = build_pdf([[PdfText("草稿：保修期调整为 36 个月。", 72, 720, 12)]])
    (document,) = upload(published_kb, staff_user, ("草稿.pdf", draft_pdf))
    chunk = Chunk.objects.filter(document=document).first()
    assert chunk is not None and chunk.bboxes
    # when
    as_reader = preview(member_api, chunk.pk)
    as_staff = preview(staff_api, chunk.pk)
    # then
    assert as_reader.status_code == 404
    assert as_reader.json()["code"] == "chunk_not_found"
    assert as_staff.status_code == 200
    assert as_staff.content.startswith(PNG_SIGNATURE)


def test_chunk_of_a_non_pdf_document_has_no_preview(member_api, published_kb):
    # given
    chunk = Chunk.objects.filter(document__knowledge_base=published_kb, document__file_type="md").first()
    assert chunk is not None
    # when
    response = preview(member_api, chunk.pk)
    english = preview(member_api, chunk.pk, HTTP_ACCEPT_LANGUAGE="en")
    # then
    assert response.status_code == 404
    assert response.json()["code"] == "preview_unavailable"
    assert "没有可预览的 PDF 页面区域" in response.json()["detail"]
    assert english.json()["detail"] == f"Chunk {chunk.pk} has no PDF page region to preview."


def test_missing_original_file_is_reported(member_api, published_kb):
    # given: the row exists but storage lost the bytes
    chunk = pdf_chunk(published_kb)
    default_storage.delete(chunk.document.file.name)
    # when
    response = preview(member_api, chunk.pk)
    # then
    assert response.status_code == 404
    assert response.json()["code"] == "document_file_missing"
    assert stored_previews(chunk.document) == []


def test_corrupt_pdf_bytes_give_a_clear_error_and_store_nothing(member_api, published_kb):
    # given: the stored original was overwritten with bytes PDFium cannot open
    chunk = pdf_chunk(published_kb)
    name = chunk.document.file.name
    default_storage.delete(name)
    assert default_storage.save(name, ContentFile(b"%PDF-1.7 garbage, not a PDF at all")) == name
    # when
    response = preview(member_api, chunk.pk)
    # then
    assert response.status_code == 422
    assert response.json()["code"] == "preview_failed"
    assert stored_previews(chunk.document) == []


def test_purging_a_document_deletes_its_previews(staff_api, milvus, run_tasks, media_root, staff_user):
    # given: a draft PDF whose preview staff opened
    kb = make_kb()
    (document,) = upload(kb, staff_user, ("保修说明.pdf", WARRANTY_PDF))
    chunk = Chunk.objects.filter(document=document).first()
    assert preview(staff_api, chunk.pk).status_code == 200
    assert len(stored_previews(document)) == 1
    version = KnowledgeBaseVersion.objects.get(knowledge_base=kb)
    # when: the document is deleted and the only version holding it retired
    catalog_services.delete_document(document=document, actor=staff_user)
    catalog_services.retire_version(version=version, actor=staff_user)
    # then
    assert not Document.objects.filter(pk=document.pk).exists()
    assert stored_previews(document) == []


def test_previews_are_stored_and_purged_on_s3(s3_storage, staff_api, milvus, run_tasks, staff_user, monkeypatch):
    # given: a draft PDF whose original lives in the bucket
    kb = make_kb()
    (document,) = upload(kb, staff_user, ("保修说明.pdf", WARRANTY_PDF))
    chunk = Chunk.objects.filter(document=document).first()
    renders = []
    real_render = previews.render_pdf_region
    monkeypatch.setattr(previews, "render_pdf_region", lambda *a: renders.append(a) or real_render(*a))
    # when: previewed twice
    first, second = preview(staff_api, chunk.pk), preview(staff_api, chunk.pk)
    # then: rendered once, stored in the bucket under its key
    assert first.status_code == second.status_code == 200
    assert first.content == second.content and len(renders) == 1
    assert previews.preview_key(chunk) in keys(s3_storage)
    # when: the document is purged
    version = KnowledgeBaseVersion.objects.get(knowledge_base=kb)
    catalog_services.delete_document(document=document, actor=staff_user)
    catalog_services.retire_version(version=version, actor=staff_user)
    # then
    assert not [key for key in keys(s3_storage) if "/previews/" in key]


def test_retrieval_results_link_previews_for_pdf_chunks_only(member_api, published_kb):
    # when: the question reaches both documents (every chunk fits in top_k)
    response = member_api.post(
        "/api/retrieval/search",
        {"knowledge_base_id": published_kb.slug, "question": "保修期和年假", "top_k": 10, "mode": "hybrid"},
        format="json",
    )
    # then
    assert response.status_code == 200, response.content
    results = response.json()
    file_types = dict(Document.objects.filter(knowledge_base=published_kb).values_list("pk", "file_type"))
    assert {file_types[r["document_id"]] for r in results} == {"pdf", "md"}
    for result in results:
        if file_types[result["document_id"]] == "pdf":
            assert result["preview_url"] == reverse("chunk-preview", args=[result["chunk_id"]])
        else:
            assert result["preview_url"] is None
    linked = next(r["preview_url"] for r in results if r["preview_url"])
    assert member_api.get(linked).content.startswith(PNG_SIGNATURE)


# --- rendering, without the database ----------------------------------------------------------------


def test_a_huge_region_is_scaled_down_to_the_size_cap():
    # given: a poster-sized page and a bbox covering all of it
    poster = build_pdf([[PdfText("poster", 100, 100, 200)]], page_size=(3000.0, 5000.0))
    # when
    image = Image.open(io.BytesIO(previews.render_pdf_region(poster, [(1, 0.0, 0.0, 3000.0, 5000.0)])))
    # then
    assert image.width <= previews.MAX_WIDTH_PX and image.height <= previews.MAX_HEIGHT_PX
    assert image.height >= previews.MAX_HEIGHT_PX - 2  # the binding side uses the cap fully


def test_regions_on_two_pages_are_stacked():
    # given
    data = build_pdf([[PdfText("page one", 72, 700)], [PdfText("page two", 72, 700)]])
    boxes = [(1, 72.0, 130.0, 200.0, 145.0), (2, 72.0, 130.0, 300.0, 145.0)]
    # when
    image = Image.open(io.BytesIO(previews.render_pdf_region(data, boxes)))
    # then: the wider page sets the width, heights add up with a gap between pages
    margin, scale = previews.MARGIN_PT, previews.SCALE
    assert abs(image.width - (228 + 2 * margin) * scale) <= 2
    assert abs(image.height - (2 * (15 + 2 * margin) * scale + previews.PAGE_GAP_PX)) <= 3


def test_a_rotated_page_is_shown_as_viewers_show_it():
    # given: the same line on a page with /Rotate 90 (bboxes stay in unrotated page space)
    pdf = pdfium.PdfDocument(build_pdf([[PdfText("rotated line", 72, 700, 12)]]))
    pdf[0].set_rotation(90)
    buffer = io.BytesIO()
    pdf.save(buffer)
    pdf.close()
    # when
    image = Image.open(io.BytesIO(previews.render_pdf_region(buffer.getvalue(), [(1, 72.0, 130.0, 200.0, 145.0)])))
    # then: turned a quarter, so the line runs downwards
    margin, scale = previews.MARGIN_PT, previews.SCALE
    assert abs(image.width - (15 + 2 * margin) * scale) <= 2
    assert abs(image.height - (128 + 2 * margin) * scale) <= 2


@pytest.mark.parametrize("data,boxes", [
    (b"not a pdf", [(1, 10.0, 10.0, 50.0, 50.0)]),
    (build_pdf([[PdfText("one page", 72, 700)]]), [(2, 10.0, 10.0, 50.0, 50.0)]),
    (build_pdf([[PdfText("one page", 72, 700)]]), [(1, 9000.0, 9000.0, 9100.0, 9100.0)]),
])
def test_unrenderable_input_fails_with_preview_failed(data, boxes):
    with pytest.raises(previews.PreviewFailed) as failure:
        previews.render_pdf_region(data, boxes)
    assert failure.value.code == "preview_failed" and failure.value.http_status == 422


def test_only_real_areas_count_as_previewable():
    assert previews.usable_boxes([[1, 0, 0, 0, 0], [0, 1, 1, 5, 5], "junk", [1, 5, 5, 2, 9]]) == []
    assert previews.has_preview(file_type="pdf", bboxes=[[1, 1, 2, 3, 4]]) is True
    assert previews.has_preview(file_type="docx", bboxes=[[1, 1, 2, 3, 4]]) is False
    assert previews.has_preview(file_type="pdf", bboxes=[]) is False


def test_reindexing_a_document_drops_the_previews_of_its_old_chunks(staff_api, milvus, run_tasks, media_root, staff_user):
    from knowledge.documents.ingestion.tasks import ingest_document
    from knowledge.models import DocumentStatus

    # given: a PDF whose chunk preview was opened
    kb = make_kb()
    (document,) = upload(kb, staff_user, ("保修说明.pdf", WARRANTY_PDF))
    old_chunk = Chunk.objects.filter(document=document).first()
    assert preview(staff_api, old_chunk.pk).status_code == 200
    assert len(stored_previews(document)) == 1
    # when: the document is indexed again (its chunks are replaced by new rows)
    Document.objects.filter(pk=document.pk).update(status=DocumentStatus.QUEUED)
    ingest_document(document_id=document.pk)
    # then: the old chunk's preview is gone, the new chunk previews as before
    assert stored_previews(document) == []
    new_chunk = Chunk.objects.filter(document=document).first()
    assert new_chunk.pk != old_chunk.pk
    assert preview(staff_api, new_chunk.pk).status_code == 200
