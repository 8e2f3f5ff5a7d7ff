from __future__ import annotations

import dataclasses
import io
import zipfile

import docx
import pytest
from docx.enum.style import WD_STYLE_TYPE

from docparse import parse_document
from docparse.types import ParseError

from .factories import encode, picture, with_member, zip_bomb


def parse(data: bytes, limits):
    return parse_document(data, file_type="docx", filename="doc.docx", limits=limits)


def test_headings_paragraphs_and_tables_in_document_order(limits, docx_bytes):
    # given
    document = docx.Document()
    document.add_paragraph("员工手册", style="Title")
    document.add_heading("第一章 总则", level=1)
    document.add_paragraph("本手册适用于全体员工。")
    table = document.add_table(rows=3, cols=2)
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            cell.text = ["类别", "上限"][c] if r == 0 else f"项目{r}|{c}\n第二行"
    document.add_heading("1.1 适用范围", level=2)
    document.add_paragraph("正文在表格之后。")

    # when
    result = parse(docx_bytes(document), limits)

    # then
    assert [(block.kind, block.heading_level) for block in result.blocks] == [
        ("text", 1),
        ("text", 1),
        ("text", 0),
        ("table", 0),
        ("text", 2),
        ("text", 0),
    ]
    table_block = result.blocks[3]
    assert table_block.table_header == "| 类别 | 上限 |\n| --- | --- |"
    assert table_block.table_rows == (
        "| 项目1\\|0 第二行 | 项目1\\|1 第二行 |",
        "| 项目2\\|0 第二行 | 项目2\\|1 第二行 |",
    )
    assert result.blocks[4].text == "1.1 适用范围"


def test_chinese_and_inherited_heading_styles(limits, docx_bytes):
    # given
    document = docx.Document()
    chinese = document.styles.add_style("标题 2", WD_STYLE_TYPE.PARAGRAPH)
    custom = document.styles.add_style("公司标题", WD_STYLE_TYPE.PARAGRAPH)
    custom.base_style = document.styles["Heading 3"]
    document.add_paragraph("二级标题", style=chinese)
    document.add_paragraph("自定义三级标题", style=custom)
    document.add_paragraph("正文。")

    # when
    result = parse(docx_bytes(document), limits)

    # then
    assert [(block.text, block.heading_level) for block in result.blocks] == [
        ("二级标题", 2),
        ("自定义三级标题", 3),
        ("正文。", 0),
    ]


def test_inline_images_become_jpeg_assets_with_caption(limits, docx_bytes):
    # given
    document = docx.Document()
    document.add_paragraph("流程如下：")
    document.add_picture(io.BytesIO(encode(picture((240, 160)), "PNG")))
    document.add_paragraph("图1 审批流程")
    document.add_picture(io.BytesIO(encode(picture((16, 16)), "PNG")))  # an icon: skipped

    # when
    result = parse(docx_bytes(document), limits)

    # then
    assert len(result.images) == 1
    image = result.images[0]
    assert image.jpeg.startswith(b"\xff\xd8") and (image.width, image.height) == (240, 160)
    assert image.nearby_text == "图1 审批流程"
    assert [block.kind for block in result.blocks] == ["text", "image", "text"]
    assert result.blocks[1].image_keys == (image.key,)


def test_zip_bomb_disguised_as_docx_is_refused(limits):
    # given: a 150 MB member of zeros, about 150 KB compressed
    data = zip_bomb(
        ["[Content_Types].xml", "word/document.xml"],
        bomb_name="word/media/image1.png",
        bomb_bytes=150 * 2**20,
    )

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, limits)

    # then
    assert caught.value.code == "archive_too_large"
    assert "压缩炸弹" in caught.value.message


def test_total_uncompressed_size_is_limited(limits):
    # given
    data = zip_bomb(
        ["[Content_Types].xml", "word/document.xml"],
        bomb_name="word/media/a.bin",
        bomb_bytes=3 * 2**20,
    )
    small = dataclasses.replace(limits, max_total_uncompressed=2 * 2**20)

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, small)

    # then
    assert caught.value.code == "archive_too_large"


def test_document_without_text_is_refused(limits, docx_bytes):
    # given
    document = docx.Document()
    document.add_paragraph("")
    document.add_paragraph("   ")

    # when
    with pytest.raises(ParseError) as caught:
        parse(docx_bytes(document), limits)

    # then
    assert caught.value.code == "no_text"


@pytest.mark.parametrize(
    "members",
    [
        {"[Content_Types].xml": "<not xml"},
        {"word/document.xml": "<w:document/>"},
    ],
)
def test_broken_package_is_refused(limits, members):
    # given
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)

    # when
    with pytest.raises(ParseError) as caught:
        parse(buffer.getvalue(), limits)

    # then
    assert caught.value.code == "corrupt_file"


def test_not_a_zip_is_refused(limits):
    # when
    with pytest.raises(ParseError) as caught:
        parse(b"PK\x03\x04 this is not really a zip", limits)

    # then
    assert caught.value.code == "corrupt_file"


def test_a_main_part_with_the_wrong_root_element_is_refused(limits, docx_bytes):
    # given: well-formed XML that python-docx trips over later (AttributeError) while reading
    document = docx.Document()
    document.add_paragraph("正文。")
    data = with_member(docx_bytes(document), "word/document.xml", b"<a/>")

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, limits)

    # then
    assert caught.value.code == "corrupt_file"
    assert "DOCX 文件已损坏" in caught.value.message
