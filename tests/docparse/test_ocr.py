from __future__ import annotations

import threading

import pytest

from docparse import ocr

from .factories import encode, text_image


def test_recognize_returns_lines_with_boxes_and_scores():
    # given
    image = text_image(["HELLO 2024"], size=(700, 160), font_size=64)

    # when
    lines = ocr.recognize(image, timeout=30)

    # then
    assert len(lines) == 1
    line = lines[0]
    assert "HELLO" in line.text and "2024" in line.text
    x0, y0, x1, y1 = line.box
    assert 0 <= x0 < 60 and 0 <= y0 < 60 and x1 > 300 and y1 > y0
    assert 0.5 < line.score <= 1.0


def test_ocr_image_text_reads_jpeg_bytes_and_tolerates_garbage():
    # given
    jpeg = encode(text_image(["ORDER 778"], size=(600, 160), font_size=64), "JPEG")

    # when
    text = ocr.ocr_image_text(jpeg, seconds=30)
    nothing = ocr.ocr_image_text(b"not an image", seconds=30)

    # then
    assert "778" in text
    assert nothing == ""


def test_recognize_gives_up_after_its_time_budget(monkeypatch):
    # given: an engine that takes longer than the budget
    release = threading.Event()

    def slow(image):
        release.wait(5)
        return []

    monkeypatch.setattr(ocr, "_run", slow)

    # when / then
    try:
        with pytest.raises(ocr.OcrTimeout):
            ocr.recognize(text_image(["X"]), timeout=0.05)
    finally:
        release.set()


def test_rows_and_paragraphs_are_grouped_by_position():
    # given
    def line(text, x0, y0, x1, y1):
        return ocr.OcrLine(text, (x0, y0, x1, y1), 0.9)

    lines = [
        line("right", 300, 10, 400, 40),
        line("left", 10, 12, 100, 42),
        line("second row", 10, 50, 200, 80),
        line("new paragraph", 10, 200, 250, 230),
    ]

    # when
    rows = ocr.group_rows(lines)
    paragraphs = ocr.group_paragraphs(lines)

    # then
    assert [[item.text for item in row] for row in rows] == [
        ["left", "right"],
        ["second row"],
        ["new paragraph"],
    ]
    assert [len(paragraph) for paragraph in paragraphs] == [2, 1]
