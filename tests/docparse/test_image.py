from __future__ import annotations

import io

import pytest
from PIL import Image

from docparse import parse_document
from docparse.types import ParseError

from .factories import encode, text_image


def parse(data: bytes, limits, file_type: str = "png"):
    return parse_document(data, file_type=file_type, filename=f"scan.{file_type}", limits=limits)


def test_png_is_ocrd_into_text_blocks_and_kept_as_a_jpeg_image(limits):
    # given
    data = encode(
        text_image(["CONTRACT NO 4711", "", "", "AMOUNT 990"], size=(900, 420), font_size=56), "PNG"
    )

    # when
    result = parse(data, limits)

    # then
    texts = [block.text for block in result.blocks if block.kind == "text"]
    assert len(texts) == 2  # two regions far apart are two paragraphs
    assert "4711" in texts[0] and "990" in texts[1]
    image = result.images[0]
    assert image.jpeg.startswith(b"\xff\xd8") and (image.width, image.height) == (900, 420)
    assert "4711" in image.ocr_text
    assert result.blocks[0].kind == "image" and result.blocks[0].image_keys == (image.key,)
    assert result.ocr_pages == [1]


def test_corrupt_image_is_refused(limits):
    # given: a valid PNG cut in half
    data = encode(text_image(["X"]), "PNG")
    truncated = data[: len(data) // 2]

    # when
    with pytest.raises(ParseError) as caught:
        parse(truncated, limits)

    # then
    assert caught.value.code == "image_corrupt"


def test_garbage_with_jpeg_magic_is_refused(limits):
    # when
    with pytest.raises(ParseError) as caught:
        parse(b"\xff\xd8\xff" + b"\x00" * 100, limits, "jpeg")

    # then
    assert caught.value.code == "image_corrupt"


def test_decompression_bomb_is_refused(limits, monkeypatch):
    # given: Pillow's pixel limit lowered so a small image stands in for a huge one
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    data = encode(Image.new("L", (200, 200), 255), "PNG")

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, limits)

    # then
    assert caught.value.code == "image_too_large"


def test_image_without_ocr_has_no_text(no_ocr):
    # when
    with pytest.raises(ParseError) as caught:
        parse(encode(text_image(["TEXT"]), "JPEG"), no_ocr, "jpeg")

    # then
    assert caught.value.code == "no_text"
    assert "OCR" in caught.value.message


def test_blank_image_has_no_text(limits):
    # given
    buffer = io.BytesIO()
    Image.new("RGB", (400, 300), "white").save(buffer, format="PNG")

    # when
    with pytest.raises(ParseError) as caught:
        parse(buffer.getvalue(), limits)

    # then
    assert caught.value.code == "no_text"
