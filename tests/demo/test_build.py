"""The demo corpus builder: every format opens with its library and says what content.py says."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
import pytest

from demo import build, content
from demo.faqs import FAQS
from demo.questions import MORE_QUESTIONS, QUESTIONS, UNANSWERABLE

PIXEL_ONLY_FILES = {"scanned_safety_notice.pdf", "guest_wifi_notice.png"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out_dir = tmp_path_factory.mktemp("demo")
    started = time.perf_counter()
    paths = build.build_demo_corpus(out_dir)
    assert time.perf_counter() - started < 10
    return {path.name: path for path in paths}


@pytest.fixture(scope="module")
def scanned_page_ocr_text(corpus: dict[str, Path]) -> str:
    """OCR is slow: run it once for every test that needs it."""
    from rapidocr_onnxruntime import RapidOCR

    page = pdfium.PdfDocument(corpus["scanned_safety_notice.pdf"])[0]
    result, _ = RapidOCR()(page.render(scale=2).to_numpy())
    return "".join(line[1] for line in result or [])


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def pdf_page_texts(path: Path) -> list[str]:
    return [page.get_textpage().get_text_range() for page in pdfium.PdfDocument(path)]


def pdf_image_count(page: pdfium.PdfPage) -> int:
    return sum(1 for _ in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=3))


def docx_text(path: Path) -> str:
    from docx import Document

    doc = Document(str(path))
    cells = [cell.text for table in doc.tables for row in table.rows for cell in row.cells]
    return "\n".join([p.text for p in doc.paragraphs] + cells)


def xlsx_text(path: Path) -> str:
    from openpyxl import load_workbook

    workbook = load_workbook(path, read_only=True)
    return "\n".join(
        str(value)
        for sheet in workbook.worksheets
        for row in sheet.iter_rows(values_only=True)
        for value in row
        if value is not None
    )


def pptx_text(path: Path) -> str:
    from pptx import Presentation

    return "\n".join(
        shape.text_frame.text
        for slide in Presentation(str(path)).slides
        for shape in slide.shapes
        if shape.has_text_frame
    )


def extracted_text(path: Path) -> str:
    readers = {".pdf": lambda p: "\n".join(pdf_page_texts(p)), ".docx": docx_text,
               ".xlsx": xlsx_text, ".pptx": pptx_text}
    reader = readers.get(path.suffix, lambda p: p.read_text(encoding="utf-8"))
    return reader(path)


def test_every_manifest_file_is_built_and_non_empty(corpus: dict[str, Path]) -> None:
    # given
    expected = [entry.name for entry in content.MANIFEST]

    # then
    assert list(corpus) == expected
    assert {path.suffix for path in corpus.values()} >= {
        ".md", ".docx", ".xlsx", ".pdf", ".png", ".csv", ".html", ".pptx"
    }
    for path in corpus.values():
        assert path.stat().st_size > 0, path.name
        assert path.stat().st_size < 1_000_000, path.name


def test_rebuilding_gives_identical_bytes(corpus: dict[str, Path], tmp_path: Path) -> None:
    # when
    rebuilt = build.build_demo_corpus(tmp_path)

    # then
    for path in rebuilt:
        original = hashlib.sha256(corpus[path.name].read_bytes()).digest()
        assert hashlib.sha256(path.read_bytes()).digest() == original, path.name


def test_missing_font_raises_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # given
    monkeypatch.setenv(build.FONT_ENV_VAR, str(tmp_path / "no-such-font.ttc"))

    # when
    with pytest.raises(build.CJKFontMissing) as error:
        build.build_demo_corpus(tmp_path / "out")

    # then
    assert "fonts-wqy-microhei" in str(error.value)
    assert not (tmp_path / "out").exists()


def test_markdown_handbook_has_headings_and_a_gfm_table(corpus: dict[str, Path]) -> None:
    # when
    text = corpus["employee_handbook.md"].read_text(encoding="utf-8")

    # then
    assert text.startswith("# 星河智造科技有限公司员工手册")
    assert "\n## 3. 假期\n" in text
    assert "\n### 3.1 带薪年假\n" in text
    assert "| 累计工作年限 | 法定年假 | 公司福利年假 | 合计 |\n| --- | --- | --- | --- |" in text
    assert "| 三类城市 | 其他城市 | 200元/晚 |" in text


def test_manual_pdf_has_a_chinese_text_layer_a_table_and_an_image(corpus: dict[str, Path]) -> None:
    # given
    pdf = pdfium.PdfDocument(corpus["product_manual.pdf"])

    # when
    texts = [squash(text) for text in pdf_page_texts(corpus["product_manual.pdf"])]
    image_counts = [pdf_image_count(page) for page in pdf]

    # then
    assert len(pdf) >= 2
    assert all(re.search(r"[\u4e00-\u9fff]", text) for text in texts)
    assert "星河X系列智能路由器用户手册" in texts[0]
    whole = "".join(texts)
    assert "按住机身背面的RESET孔10秒" in whole
    assert "5400Mbps" in whole and "最大接入终端" in whole  # the spec table is real text
    assert sum(image_counts) >= 1
    assert [title for title in (b.get_title() for b in pdf.get_toc())][:2] == ["1. 产品简介", "2. 规格参数"]


def test_scanned_pdf_page_is_an_image_without_text(corpus: dict[str, Path]) -> None:
    # given
    pdf = pdfium.PdfDocument(corpus["scanned_safety_notice.pdf"])

    # then
    assert len(pdf) == 1
    assert squash(pdf[0].get_textpage().get_text_range()) == ""
    assert pdf_image_count(pdf[0]) == 1


def test_scanned_page_is_readable_by_ocr(scanned_page_ocr_text: str) -> None:
    # when
    text = squash(scanned_page_ocr_text)

    # then
    assert "办公室安全检查" in text
    assert "2024年11月18日" in text
    assert "分机8126" in text


def test_docx_guide_has_heading_styles_paragraphs_and_tables(corpus: dict[str, Path]) -> None:
    from docx import Document

    # when
    doc = Document(str(corpus["it_helpdesk_guide.docx"]))
    styles = {p.style.name for p in doc.paragraphs}

    # then
    assert {"Title", "Heading 1", "Heading 2", "List Number"} <= styles
    assert any(p.text == "3. VPN 远程访问" and p.style.name == "Heading 1" for p in doc.paragraphs)
    assert len(doc.tables) >= 2
    assert doc.tables[0].rows[0].cells[0].text == "优先级"
    assert "空闲 30 分钟后自动断开" in docx_text(corpus["it_helpdesk_guide.docx"])


def test_xlsx_has_spec_price_and_outlet_sheets_with_header_rows(corpus: dict[str, Path]) -> None:
    from openpyxl import load_workbook

    # when
    workbook = load_workbook(corpus["product_specs.xlsx"])

    # then
    assert workbook.sheetnames == ["产品规格", "价格与保修", "售后服务网点"]
    specs = list(workbook["产品规格"].iter_rows(values_only=True))
    assert specs[0][:3] == ("型号", "定位", "Wi-Fi 标准")
    assert [row[0] for row in specs[1:]] == ["星河X1", "星河X3", "星河X3 Pro", "星河X5 Mesh"]
    prices = {row[0]: row[3] for row in workbook["价格与保修"].iter_rows(min_row=2, values_only=True)}
    assert prices["星河X3"] == "2年"


def test_pptx_deck_opens_with_onboarding_slides(corpus: dict[str, Path]) -> None:
    from pptx import Presentation

    # when
    deck = Presentation(str(corpus["onboarding_training.pptx"]))

    # then
    assert len(deck.slides) == len(content.ONBOARDING_DECK)
    assert deck.slides[0].shapes.title.text == "星河启航：新员工入职培训"
    assert "XH-Connect VPN客户端" in pptx_text(corpus["onboarding_training.pptx"])


def test_csv_and_html_are_plain_utf8(corpus: dict[str, Path]) -> None:
    # when
    csv_bytes = corpus["office_locations.csv"].read_bytes()
    html = corpus["it_announcement_vpn.html"].read_text(encoding="utf-8")

    # then
    assert csv_bytes.decode("utf-8").startswith("办公地点,地址,楼层")
    assert '<meta charset="utf-8">' in html
    assert "<h1>关于 XH-Connect VPN客户端升级至 5.2 版本的通知</h1>" in html


def test_faqs_are_complete_and_unique() -> None:
    # then
    assert len(FAQS) >= 15
    questions = [faq["question"] for faq in FAQS]
    assert len(set(questions)) == len(questions)
    known_tags = {entry.source_tag for entry in content.MANIFEST}
    for faq in FAQS:
        assert set(faq) == {"question", "similar_questions", "answer", "source_tag"}
        assert faq["question"].strip() and faq["answer"].strip()
        assert 1 <= len(faq["similar_questions"]) <= 3
        assert all(similar.strip() for similar in faq["similar_questions"])
        assert faq["source_tag"] in known_tags


def test_eval_questions_point_at_text_their_file_really_contains(
    corpus: dict[str, Path], scanned_page_ocr_text: str
) -> None:
    # given
    sources = {name: squash(extracted_text(path)) for name, path in corpus.items()
               if name not in PIXEL_ONLY_FILES}
    sources["scanned_safety_notice.pdf"] = squash(scanned_page_ocr_text)
    questions = [item["question"] for item in QUESTIONS + MORE_QUESTIONS] + UNANSWERABLE

    # then
    assert len(QUESTIONS) >= 20 and len(QUESTIONS + MORE_QUESTIONS) + len(UNANSWERABLE) >= 40
    assert len(set(questions)) == len(questions)
    for item in QUESTIONS + MORE_QUESTIONS:
        assert set(item) == {"question", "expected_answer", "file", "must_contain"}
        text = sources[item["file"]]
        assert squash(item["must_contain"]) in text, item
        assert squash(item["expected_answer"]) in text, item
