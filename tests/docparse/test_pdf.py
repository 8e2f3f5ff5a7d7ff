from __future__ import annotations

import dataclasses

import pytest

from docparse import ParseLimits, parse_document
from docparse.types import ParseError

from .factories import PdfPicture, PdfText, build_pdf, encode, picture, text_image


def parse(data: bytes, limits: ParseLimits):
    return parse_document(data, file_type="pdf", filename="doc.pdf", limits=limits)


def test_text_lines_become_paragraphs_with_page_and_top_left_bbox(no_ocr):
    # given
    data = build_pdf(
        [
            [
                PdfText("第一章 总则", 72, 760, 18),
                PdfText("本制度适用于全体员工，", 72, 730, 12),
                PdfText("自发布之日起施行。", 72, 715, 12),
                PdfText("Second paragraph in English.", 72, 680, 12),
            ],
            [PdfText("Page two text.", 100, 700, 12)],
        ]
    )

    # when
    result = parse(data, no_ocr)

    # then
    texts = [(block.text, block.heading_level, block.locator.page) for block in result.blocks]
    assert texts == [
        ("第一章 总则", 1, 1),
        ("本制度适用于全体员工，自发布之日起施行。", 0, 1),
        ("Second paragraph in English.", 0, 1),
        ("Page two text.", 0, 2),
    ]
    assert result.page_count == 2
    bbox = result.blocks[1].bboxes[0]
    assert bbox.page == 1
    assert 70 <= bbox.x0 <= 73
    # Top-left origin on an 842pt page: the line at y=730 sits ~100pt below the top edge.
    assert 95 <= bbox.y0 <= 105 < bbox.y1 <= 135
    assert bbox.x1 > bbox.x0


def test_heading_levels_follow_font_size(no_ocr):
    # given
    body = [
        PdfText(f"Body line number {i} with enough words.", 72, 600 - i * 14, 11) for i in range(8)
    ]
    data = build_pdf(
        [[PdfText("Annual Report", 72, 780, 24), PdfText("Scope", 72, 740, 16), *body]]
    )

    # when
    result = parse(data, no_ocr)

    # then
    assert [(block.text, block.heading_level) for block in result.blocks[:2]] == [
        ("Annual Report", 1),
        ("Scope", 2),
    ]
    assert all(block.heading_level == 0 for block in result.blocks[2:])


def test_embedded_images_are_extracted_as_jpeg_with_bbox_and_caption(no_ocr):
    # given
    jpeg = encode(picture((300, 200)), "JPEG")
    tiny = encode(picture((20, 20)), "JPEG")
    data = build_pdf(
        [
            [
                PdfText("Overview paragraph.", 72, 760, 12),
                PdfPicture(jpeg, 300, 200, 72, 400, 150, 100),
                PdfText("图1 系统架构", 72, 385, 10),
                PdfPicture(tiny, 20, 20, 300, 300, 20, 20),
            ],
            # The same picture again (a logo on every page) is kept once.
            [PdfText("Page two.", 72, 760, 12), PdfPicture(jpeg, 300, 200, 72, 400, 150, 100)],
        ]
    )

    # when
    result = parse(data, no_ocr)

    # then
    assert len(result.images) == 1
    image = result.images[0]
    assert image.jpeg.startswith(b"\xff\xd8")
    assert (image.width, image.height, image.page) == (300, 200, 1)
    assert image.bbox is not None
    assert image.bbox.as_list() == [1, 72.0, 342.0, 222.0, 442.0]
    assert image.nearby_text == "图1 系统架构"
    image_blocks = [block for block in result.blocks if block.kind == "image"]
    assert [block.image_keys for block in image_blocks] == [(image.key,)]
    kinds = [block.kind for block in result.blocks if block.locator.page == 1]
    assert kinds == ["text", "image", "text"]


def test_encrypted_pdf_is_refused(limits):
    # given
    data = build_pdf([[PdfText("secret", 72, 700)]], encrypted=True)

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, limits)

    # then
    assert caught.value.code == "pdf_encrypted"
    assert "密码" in caught.value.message


@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_truncated_pdf_is_refused(limits, keep):
    # given
    pages = [[PdfText(f"Page {n} text.", 72, 700)] for n in range(5)]
    data = build_pdf(pages)
    truncated = data[: int(len(data) * keep)]

    # when
    with pytest.raises(ParseError) as caught:
        parse(truncated, limits)

    # then
    assert caught.value.code == "pdf_corrupt"


def test_garbage_with_pdf_header_is_refused(limits):
    # given
    data = b"%PDF-1.7\n" + b"\x00garbage" * 200 + b"\n%%EOF\n"

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, limits)

    # then
    assert caught.value.code == "pdf_corrupt"


def test_blank_pages_without_ocr_have_no_text(no_ocr):
    # given
    data = build_pdf([[], []])

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, no_ocr)

    # then
    assert caught.value.code == "no_text"
    assert "OCR" in caught.value.message


def test_page_limit(limits):
    # given
    data = build_pdf([[PdfText("a", 72, 700)], [PdfText("b", 72, 700)], [PdfText("c", 72, 700)]])

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, dataclasses.replace(limits, max_pages=2))

    # then
    assert caught.value.code == "too_many_pages"


def test_scanned_page_is_ocrd_with_bboxes_and_the_scan_is_not_kept_as_an_image(limits):
    # given: a page that is one full-page picture of text, next to a page with a text layer
    scan = text_image(["INVOICE 2024", "TOTAL 12345"], size=(1190, 1684), font_size=72)
    data = build_pdf(
        [
            [PdfText("Cover page with text.", 72, 760, 12)],
            [PdfPicture(encode(scan, "JPEG"), 1190, 1684, 0, 0, 595, 842)],
        ]
    )

    # when
    result = parse(data, limits)

    # then
    assert result.ocr_pages == [2]
    assert result.images == []
    page_two = [block for block in result.blocks if block.locator.page == 2]
    text = " ".join(block.text for block in page_two)
    assert "INVOICE" in text and "12345" in text
    bbox = page_two[0].bboxes[0]
    # Text drawn ~15 px from the top-left of a 2x-resolution scan: near the page's top-left.
    assert bbox.page == 2 and 0 <= bbox.x0 < 60 and 0 <= bbox.y0 < 60


def test_scanned_page_without_ocr_is_reported_in_warnings(no_ocr):
    # given
    scan = text_image(["SCANNED"], size=(600, 800))
    data = build_pdf(
        [
            [PdfText("Text page.", 72, 760, 12)],
            [PdfPicture(encode(scan, "JPEG"), 600, 800, 0, 0, 595, 842)],
        ]
    )

    # when
    result = parse(data, no_ocr)

    # then
    assert result.ocr_pages == []
    assert any("第 2 页" in warning and "OCR" in warning for warning in result.warnings)


def test_scanned_pages_beyond_the_ocr_page_budget_are_skipped_with_a_warning(limits):
    # given
    scan = encode(text_image(["SCANNED"], size=(600, 800)), "JPEG")
    data = build_pdf(
        [[PdfText("Text page.", 72, 760, 12)]]
        + [[PdfPicture(scan, 600, 800, 0, 0, 595, 842)] for _ in range(3)]
    )

    # when
    result = parse(data, dataclasses.replace(limits, max_ocr_pages=0))

    # then
    assert result.ocr_pages == []
    assert result.warnings == ["第 2、3、4 页没有文字层，超出 OCR 页数或时间预算，未识别。"]


def test_numbered_headings_when_all_text_has_one_size(no_ocr):
    # given
    data = build_pdf(
        [
            [
                PdfText("第一章 总则", 72, 760, 12),
                PdfText("为规范费用报销，制定本制度。", 72, 730, 12),
                PdfText("第一节 适用范围", 72, 700, 12),
                PdfText("本制度适用于全体员工。", 72, 670, 12),
            ]
        ]
    )

    # when
    result = parse(data, no_ocr)

    # then
    assert [(block.text, block.heading_level) for block in result.blocks] == [
        ("第一章 总则", 1),
        ("为规范费用报销，制定本制度。", 0),
        ("第一节 适用范围", 2),
        ("本制度适用于全体员工。", 0),
    ]


def test_running_headers_and_footers_are_dropped(limits):
    # given: three pages with a footer "用户手册 · 第 N 页" at the bottom and a body line each
    pages = [
        [PdfText(f"第{n}章正文内容，介绍产品的使用方法。", 72, 700), PdfText(f"用户手册 第 {n} 页", 250, 20, size=9)]
        for n in (1, 2, 3)
    ]
    # when
    result = parse(build_pdf(pages), limits)
    # then
    text = "\n".join(block.text for block in result.blocks)
    assert "正文内容" in text
    assert "用户手册" not in text


def test_an_undecodable_image_drawn_with_no_area_is_ignored(no_ocr):
    # given: PDFium cannot decode the data, and rendering it instead divided by its zero width
    data = build_pdf(
        [
            [
                PdfText("Text page.", 72, 760, 12),
                PdfPicture(b"\xff\xd8 not a jpeg" * 10, 300, 200, 72, 400, 0, 100),
            ]
        ]
    )

    # when
    result = parse(data, no_ocr)

    # then
    assert result.images == []
    assert [block.text for block in result.blocks] == ["Text page."]
