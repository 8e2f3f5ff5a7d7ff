from __future__ import annotations

import io

import pytest
from pptx import Presentation
from pptx.util import Inches

from docparse import parse_document
from docparse.types import Locator, ParseError

from .factories import encode, picture, with_member, zip_bomb


def save(presentation) -> bytes:
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


def parse(data: bytes, limits):
    return parse_document(data, file_type="pptx", filename="deck.pptx", limits=limits)


def test_slides_become_sections_with_text_tables_pictures_and_notes(limits):
    # given
    presentation = Presentation()
    first = presentation.slides.add_slide(presentation.slide_layouts[1])
    first.shapes.title.text = "季度总结"
    first.placeholders[1].text_frame.text = "收入增长 20%\n成本下降"
    first.notes_slide.notes_text_frame.text = "强调增长来源"
    second = presentation.slides.add_slide(presentation.slide_layouts[5])
    second.shapes.title.text = "明细"
    table = second.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(4), Inches(1.5)).table
    for r in range(3):
        for c in range(2):
            table.cell(r, c).text = (
                ["地区", "收入"][c] if r == 0 else f"{'华东华南'[r * 2 - 2 : r * 2]}{c}"
            )
    second.shapes.add_picture(io.BytesIO(encode(picture((300, 200)), "PNG")), Inches(1), Inches(4))
    caption = second.shapes.add_textbox(Inches(1), Inches(6.5), Inches(4), Inches(0.5))
    caption.text_frame.text = "图 2 区域分布"

    # when
    result = parse(save(presentation), limits)

    # then
    summary = [(block.kind, block.heading_level, block.locator.slide) for block in result.blocks]
    assert summary == [
        ("text", 1, 1),
        ("text", 0, 1),
        ("text", 0, 1),
        ("text", 1, 2),
        ("table", 0, 2),
        ("image", 0, 2),
        ("text", 0, 2),
    ]
    assert result.blocks[0].text == "季度总结"
    assert result.blocks[1].text == "收入增长 20%\n成本下降"
    assert result.blocks[2].text == "备注：强调增长来源"
    assert result.blocks[4].table_header == "| 地区 | 收入 |\n| --- | --- |"
    assert result.blocks[4].table_rows == ("| 华东0 | 华东1 |", "| 华南0 | 华南1 |")
    assert result.images[0].nearby_text == "图 2 区域分布"
    assert result.blocks[5].image_keys == (result.images[0].key,)
    assert result.page_count == 2


def test_untitled_slide_gets_its_own_section(limits):
    # given
    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[6])
    box = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1))
    box.text_frame.text = "只有正文"

    # when
    result = parse(save(presentation), limits)

    # then
    assert [(block.text, block.heading_level, block.locator) for block in result.blocks] == [
        ("第 1 页幻灯片", 1, Locator(slide=1)),
        ("只有正文", 0, Locator(slide=1)),
    ]


def test_zip_bomb_disguised_as_pptx_is_refused(limits):
    # given
    data = zip_bomb(
        ["[Content_Types].xml", "ppt/presentation.xml"],
        bomb_name="ppt/media/x.png",
        bomb_bytes=120 * 2**20,
    )

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, limits)

    # then
    assert caught.value.code == "archive_too_large"


def test_empty_presentation_has_no_text(limits):
    # given
    presentation = Presentation()
    presentation.slides.add_slide(presentation.slide_layouts[6])

    # when
    with pytest.raises(ParseError) as caught:
        parse(save(presentation), limits)

    # then
    assert caught.value.code == "no_text"


@pytest.mark.parametrize(
    ("member", "content"),
    [
        # Slides are read lazily, while iterating: a missing part or relationship (KeyError).
        ("ppt/slides/slide1.xml", None),
        ("ppt/slides/_rels/slide1.xml.rels", None),
        ("docProps/core.xml", b"<a/>"),
    ],
)
def test_malformed_parts_are_refused_not_crashed_on(limits, member, content):
    # given
    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "标题"
    data = with_member(save(presentation), member, content)

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, limits)

    # then
    assert caught.value.code == "corrupt_file"
    assert "PPTX 文件已损坏" in caught.value.message
