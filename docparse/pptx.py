"""PPTX via python-pptx: one section per slide (its title), text frames, tables, pictures, notes."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator

from pptx import Presentation
from pptx.exc import PythonPptxError
from pptx.shapes.base import BaseShape
from pptx.shapes.group import GroupShape
from pptx.shapes.picture import Picture

from ._common import (
    ImageSkipped,
    attach_nearby_text,
    check_archive,
    embedded_image_to_jpeg,
    reading_office_file,
    table_from_rows,
)
from .limits import ParseLimits
from .types import Block, Locator, ParsedImage, ParseResult


def parse_pptx(data: bytes, *, limits: ParseLimits) -> ParseResult:
    check_archive(data, limits=limits, kind="PPTX")
    with reading_office_file("PPTX", PythonPptxError):
        return _parse(Presentation(io.BytesIO(data)), limits)


def _parse(presentation, limits: ParseLimits) -> ParseResult:
    # Parts are parsed lazily: a broken one raises anywhere in here.
    blocks: list[Block] = []
    images: list[ParsedImage] = []
    warnings: list[str] = []
    slide_count = 0
    for number, slide in enumerate(presentation.slides, start=1):
        slide_count = number
        locator = Locator(slide=number)
        title_shape = slide.shapes.title
        title = _text_of(title_shape) if title_shape is not None else ""
        shapes = [
            shape
            for shape in _flatten(slide.shapes)
            if title_shape is None or shape.shape_id != title_shape.shape_id
        ]
        body: list[Block] = []
        for shape in sorted(shapes, key=lambda item: (item.top or 0, item.left or 0)):
            body.extend(_shape_blocks(shape, locator, images, warnings, limits))
        notes = _notes(slide)
        if notes:
            body.append(Block(kind="text", text=f"备注：{notes}", locator=locator))
        if not title and not body:
            continue
        # Untitled slides still get their own section, so their chunks never inherit the
        # previous slide's title and always cite a single slide.
        blocks.append(
            Block(
                kind="text", text=title or f"第 {number} 页幻灯片", heading_level=1, locator=locator
            )
        )
        blocks.extend(body)
    if len(images) >= limits.max_images:
        warnings.append(f"图片超过 {limits.max_images} 张，其余图片未提取。")
    blocks, images = attach_nearby_text(blocks, images)
    title = (presentation.core_properties.title or "").strip() or None
    return ParseResult(
        blocks=blocks, images=images, page_count=slide_count, title=title, warnings=warnings
    )


def _flatten(shapes: Iterable[BaseShape]) -> Iterator[BaseShape]:
    for shape in shapes:
        if isinstance(shape, GroupShape):
            yield from _flatten(shape.shapes)
        else:
            yield shape


def _shape_blocks(
    shape: BaseShape,
    locator: Locator,
    images: list[ParsedImage],
    warnings: list[str],
    limits: ParseLimits,
) -> list[Block]:
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
        header, body = table_from_rows(rows)
        if not header:
            return []
        return [
            Block(
                kind="table",
                text="\n".join((header, *body)),
                locator=locator,
                table_header=header,
                table_rows=body,
            )
        ]
    if isinstance(shape, Picture):  # placeholder pictures are Pictures too
        image = _picture(shape, len(images), warnings, limits)
        if image is None:
            return []
        images.append(image)
        return [Block(kind="image", text="", locator=locator, image_keys=(image.key,))]
    if shape.has_text_frame:
        text = _text_of(shape)
        return [Block(kind="text", text=text, locator=locator)] if text else []
    return []


def _picture(
    shape: BaseShape, index: int, warnings: list[str], limits: ParseLimits
) -> ParsedImage | None:
    if index >= limits.max_images:
        return None
    try:
        blob = shape.image.blob  # type: ignore[attr-defined]
    except (AttributeError, ValueError, KeyError):
        # Linked (not embedded) pictures have no bytes in the file.
        return None
    try:
        jpeg = embedded_image_to_jpeg(blob, limits=limits)
    except ImageSkipped as skipped:
        if skipped.warn:
            warnings.append(f"幻灯片中有一张图片{skipped.reason}。")
        return None
    return ParsedImage(
        key=f"img-{index + 1:04d}", jpeg=jpeg.jpeg, width=jpeg.width, height=jpeg.height
    )


def _notes(slide) -> str:
    if not slide.has_notes_slide:
        return ""
    frame = slide.notes_slide.notes_text_frame
    return _clean(frame.text) if frame is not None else ""


def _text_of(shape: BaseShape) -> str:
    if not getattr(shape, "has_text_frame", False) or not shape.has_text_frame:
        return ""
    return _clean(shape.text_frame.text)  # type: ignore[attr-defined]


def _clean(text: str) -> str:
    # python-pptx renders soft line breaks as vertical tabs.
    lines = (line.strip() for line in text.replace("\v", "\n").splitlines())
    return "\n".join(line for line in lines if line)
