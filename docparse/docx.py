"""DOCX via python-docx: headings, paragraphs and tables in document order, inline images."""

from __future__ import annotations

import io
import re

import docx
from docx.exceptions import PythonDocxError
from docx.opc.exceptions import OpcError
from docx.table import Table
from docx.text.paragraph import Paragraph

from ._common import (
    ImageSkipped,
    attach_nearby_text,
    check_archive,
    embedded_image_to_jpeg,
    reading_office_file,
    table_from_rows,
)
from .limits import ParseLimits
from .types import Block, ParsedImage, ParseResult

_HEADING_STYLE = re.compile(r"^(?:heading|标题)\s*([1-9])$", re.IGNORECASE)
_TITLE_STYLES = {"title", "标题"}
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_BLIP = "{http://schemas.openxmlformats.org/drawingml/2006/main}blip"
_VML_IMAGEDATA = "{urn:schemas-microsoft-com:vml}imagedata"
_EMBED = f"{_R}embed"
_RELATION_ID = f"{_R}id"
# Custom heading styles usually inherit from a built-in one a level or two up.
MAX_STYLE_DEPTH = 5


def parse_docx(data: bytes, *, limits: ParseLimits) -> ParseResult:
    check_archive(data, limits=limits, kind="DOCX")
    with reading_office_file("DOCX", OpcError, PythonDocxError):
        return _parse(docx.Document(io.BytesIO(data)), limits)


def _parse(document, limits: ParseLimits) -> ParseResult:
    # Parts are parsed lazily: a broken one raises anywhere in here.
    blocks: list[Block] = []
    images: list[ParsedImage] = []
    warnings: list[str] = []
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            block = _table_block(item)
            if block is not None:
                blocks.append(block)
            continue
        text = item.text.strip()
        if text:
            blocks.append(Block(kind="text", text=text, heading_level=_heading_level(item)))
        for image in _paragraph_images(item, document, limits, warnings, start=len(images)):
            images.append(image)
            blocks.append(Block(kind="image", text="", image_keys=(image.key,)))
    if len(images) >= limits.max_images:
        warnings.append(f"图片超过 {limits.max_images} 张，其余图片未提取。")
    blocks, images = attach_nearby_text(blocks, images)
    title = (document.core_properties.title or "").strip() or None
    return ParseResult(blocks=blocks, images=images, title=title, warnings=warnings)


def _heading_level(paragraph: Paragraph) -> int:
    style = paragraph.style
    for _ in range(MAX_STYLE_DEPTH):
        if style is None:
            break
        name = (style.name or "").strip()
        match = _HEADING_STYLE.match(name)
        if match:
            return int(match.group(1)) if int(match.group(1)) <= 6 else 0
        if name.lower() in _TITLE_STYLES:
            return 1
        style = style.base_style
    # Documents from other editors mark headings only by outline level.
    levels = paragraph._p.xpath("./w:pPr/w:outlineLvl/@w:val")
    if levels and levels[0].isdigit() and int(levels[0]) < 6:
        return int(levels[0]) + 1
    return 0


def _table_block(table: Table) -> Block | None:
    rows = [[cell.text for cell in row.cells] for row in table.rows]
    header, body = table_from_rows(rows)
    if not header:
        return None
    text = "\n".join((header, *body))
    return Block(kind="table", text=text, table_header=header, table_rows=body)


def _paragraph_images(
    paragraph: Paragraph,
    document,
    limits: ParseLimits,
    warnings: list[str],
    *,
    start: int,
) -> list[ParsedImage]:
    relation_ids = [
        element.get(_EMBED) or element.get(_RELATION_ID)
        for element in paragraph._p.iter(_BLIP, _VML_IMAGEDATA)
    ]
    found: list[ParsedImage] = []
    for relation_id in relation_ids:
        if start + len(found) >= limits.max_images:
            break
        part = document.part.related_parts.get(relation_id) if relation_id else None
        blob = getattr(part, "blob", None)
        if not blob:
            continue
        try:
            jpeg = embedded_image_to_jpeg(blob, limits=limits)
        except ImageSkipped as skipped:
            if skipped.warn:
                warnings.append(f"文档中有一张图片{skipped.reason}。")
            continue
        key = f"img-{start + len(found) + 1:04d}"
        found.append(ParsedImage(key=key, jpeg=jpeg.jpeg, width=jpeg.width, height=jpeg.height))
    return found
