"""Chunk previews: the PDF region a chunk came from, as a PNG with the chunk's lines highlighted.

Previews are derived data. The first request renders one with PDFium and stores it in default
storage; later requests serve the stored bytes. The key is bound to the document's bytes, the
chunk's bboxes and `RENDER_VERSION`, so a stored preview can never show anything but what a fresh
render would, and two concurrent renders write the same bytes to the same key. All previews of a
document live in one folder, which its purge lists and empties (`listdir` works on the local
filesystem and on S3 alike).

Bboxes are `[page, x0, y0, x1, y1]`: 1-based page, PDF points relative to the crop box's
top-left corner, in the page's unrotated space (see `parsing.pdf`).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass

import pypdfium2 as pdfium
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.utils.translation import gettext as _
from PIL import Image, ImageDraw

from ragsite.errors import DomainError, NotFound

from knowledge.models import Chunk

logger = logging.getLogger(__name__)

# Bump when the rendering changes (scale, margin, colours): stored previews become unreachable.
RENDER_VERSION = 1
SCALE = 2.0  # ≈144 dpi
MARGIN_PT = 12.0
HIGHLIGHT_PAD_PT = 1.5
MAX_WIDTH_PX = 1600
MAX_HEIGHT_PX = 2400
# A chunk rarely spans more than two pages; beyond three the picture stops being "the region".
MAX_PAGES = 3
PAGE_GAP_PX = 8
PAGE_GAP_COLOR = (200, 200, 200)
HIGHLIGHT_FILL = (255, 214, 0, 70)
HIGHLIGHT_OUTLINE = (230, 160, 0, 200)
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_END = b"IEND\xaeB`\x82"

Box = tuple[int, float, float, float, float]


class PreviewFailed(DomainError):
    """The stored PDF could not be opened or rendered: retrying will not help."""

    code = "preview_failed"
    http_status = 422


def usable_boxes(bboxes: Iterable) -> list[Box]:
    """The bboxes that mark a real area; an image without known bounds is stored as all zeros."""
    boxes: list[Box] = []
    for value in bboxes or ():
        try:
            page, x0, y0, x1, y1 = value
            box = (int(page), float(x0), float(y0), float(x1), float(y1))
        except (TypeError, ValueError):
            continue
        if box[0] >= 1 and box[3] > box[1] and box[4] > box[2] and all(map(math.isfinite, box[1:])):
            boxes.append(box)
    return boxes


def has_preview(*, file_type: str, bboxes: Iterable) -> bool:
    return file_type == "pdf" and bool(usable_boxes(bboxes))


def preview_folder(*, kb_id: int, document_id: int) -> str:
    return f"kb/{kb_id}/previews/{document_id}"


def preview_key(chunk: Chunk) -> str:
    document = chunk.document
    boxes = usable_boxes(chunk.bboxes)
    parts = {"document": document.sha256, "bboxes": boxes, "render": RENDER_VERSION}
    digest = hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()
    folder = preview_folder(kb_id=document.knowledge_base_id, document_id=document.pk)
    return f"{folder}/{chunk.pk}-{digest[:32]}.png"


def render_chunk_preview(chunk: Chunk) -> bytes:
    """PNG of the chunk's region of its PDF, from the preview store or freshly rendered."""
    document = chunk.document
    boxes = usable_boxes(chunk.bboxes)
    if document.file_type != "pdf" or not boxes:
        raise NotFound(
            _("分块 %(id)s 没有可预览的 PDF 页面区域。") % {"id": chunk.pk}, code="preview_unavailable"
        )
    key = preview_key(chunk)
    stored = _read_stored(key)
    if stored is not None:
        return stored
    png = render_pdf_region(_read_original(document), boxes)
    _store(key, png)
    return png


def delete_document_previews(*, kb_id: int, document_id: int) -> None:
    """Remove every stored preview of a document (called after its purge commits)."""
    folder = preview_folder(kb_id=kb_id, document_id=document_id)
    try:
        _, names = default_storage.listdir(folder)
    except FileNotFoundError:
        return  # no preview was ever rendered
    except OSError as exc:
        logger.warning("could not list previews in %s: %s", folder, exc)
        return
    for name in names:
        try:
            default_storage.delete(f"{folder}/{name}")
        except OSError as exc:
            logger.warning("could not delete preview %s/%s: %s", folder, name, exc)


# --- storage ------------------------------------------------------------------------------------


def _read_original(document) -> bytes:
    try:
        with document.file.open("rb") as handle:
            return handle.read()
    except OSError as exc:  # the row exists but storage lost the bytes
        raise NotFound(
            _("文档 %(id)s 的原始文件已丢失，无法生成预览。") % {"id": document.pk},
            code="document_file_missing",
        ) from exc


def _read_stored(key: str) -> bytes | None:
    # The preview store is a cache: whatever goes wrong reading it, rendering again is correct.
    try:
        if not default_storage.exists(key):
            return None
        with default_storage.open(key, "rb") as handle:
            data = handle.read()
    except Exception as exc:  # noqa: BLE001 - S3 raises botocore errors, not OSError
        logger.warning("could not read stored preview %s: %s", key, exc)
        return None
    # A file another request is still writing is served as a fresh render, not truncated.
    if data.startswith(_PNG_SIGNATURE) and data.endswith(_PNG_END):
        return data
    return None


def _store(key: str, png: bytes) -> None:
    try:
        saved = default_storage.save(key, ContentFile(png))
        if saved != key:
            # A concurrent render stored the same bytes first; storage picked another name.
            default_storage.delete(saved)
    except Exception as exc:  # noqa: BLE001 - a failed cache write must not fail the preview
        logger.warning("could not store preview %s: %s", key, exc)


# --- rendering ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Region:
    page: int  # 1-based
    left: float
    top: float
    right: float
    bottom: float
    rotation: int  # the page's /Rotate, applied to the picture last
    boxes: tuple[Box, ...]

    @property
    def shown_size(self) -> tuple[float, float]:
        width, height = self.right - self.left, self.bottom - self.top
        return (height, width) if self.rotation in (90, 270) else (width, height)


def render_pdf_region(data: bytes, boxes: list[Box]) -> bytes:
    """Render the union of `boxes` per page (first `MAX_PAGES` pages), stacked, highlighted."""
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        raise PreviewFailed(_("PDF 文件无法打开，无法生成预览。")) from exc
    try:
        pages = sorted({box[0] for box in boxes})[:MAX_PAGES]
        if pages[-1] > len(pdf):
            raise PreviewFailed(
                _("PDF 没有第 %(page)s 页，无法生成预览。") % {"page": pages[-1]}
            )
        regions = [_region(pdf, page, [b for b in boxes if b[0] == page]) for page in pages]
        regions = [region for region in regions if region is not None]
        if not regions:
            raise PreviewFailed(_("分块的页面区域超出了 PDF 页面范围，无法生成预览。"))
        gaps = PAGE_GAP_PX * (len(regions) - 1)
        scale = min(
            SCALE,
            MAX_WIDTH_PX / max(region.shown_size[0] for region in regions),
            max(MAX_HEIGHT_PX - gaps, 1) / sum(region.shown_size[1] for region in regions),
        )
        images = [_render_region(pdf, region, scale) for region in regions]
    finally:
        pdf.close()
    return _encode(_stack(images))


def _region(pdf: pdfium.PdfDocument, number: int, boxes: list[Box]) -> _Region | None:
    page = _page(pdf, number)
    try:
        width, height = _unrotated_size(page)
        rotation = page.get_rotation()
    finally:
        page.close()
    left = max(min(b[1] for b in boxes) - MARGIN_PT, 0.0)
    top = max(min(b[2] for b in boxes) - MARGIN_PT, 0.0)
    right = min(max(b[3] for b in boxes) + MARGIN_PT, width)
    bottom = min(max(b[4] for b in boxes) + MARGIN_PT, height)
    if right - left < 1 or bottom - top < 1:
        return None
    return _Region(number, left, top, right, bottom, rotation, tuple(boxes))


def _page(pdf: pdfium.PdfDocument, number: int) -> pdfium.PdfPage:
    try:
        return pdf[number - 1]
    except pdfium.PdfiumError as exc:
        raise PreviewFailed(_("PDF 第 %(page)s 页无法读取，无法生成预览。") % {"page": number}) from exc


def _unrotated_size(page: pdfium.PdfPage) -> tuple[float, float]:
    width, height = page.get_size()  # as displayed, i.e. after /Rotate
    return (height, width) if page.get_rotation() in (90, 270) else (width, height)


def _render_region(pdf: pdfium.PdfDocument, region: _Region, scale: float) -> Image.Image:
    page = _page(pdf, region.page)
    try:
        width, height = _unrotated_size(page)
        # Bboxes live in unrotated page space: render that space, crop it, rotate the picture
        # last so the reader sees the page as any PDF viewer shows it.
        crop = (region.left, height - region.bottom, width - region.right, region.top)
        bitmap = page.render(scale=scale, rotation=(360 - region.rotation) % 360, crop=crop)
        image = bitmap.to_pil().convert("RGBA")
    except (pdfium.PdfiumError, ValueError) as exc:
        raise PreviewFailed(
            _("PDF 第 %(page)s 页无法渲染，无法生成预览。") % {"page": region.page}
        ) from exc
    finally:
        page.close()
    # PDFium rounds the crop up to whole pixels; highlight in the same pixel grid.
    origin_x, origin_y = math.ceil(region.left * scale), math.ceil(region.top * scale)
    overlay = Image.new("RGBA", image.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    for _page_number, x0, y0, x1, y1 in region.boxes:
        draw.rectangle(
            (
                (x0 - HIGHLIGHT_PAD_PT) * scale - origin_x,
                (y0 - HIGHLIGHT_PAD_PT) * scale - origin_y,
                (x1 + HIGHLIGHT_PAD_PT) * scale - origin_x,
                (y1 + HIGHLIGHT_PAD_PT) * scale - origin_y,
            ),
            fill=HIGHLIGHT_FILL,
            outline=HIGHLIGHT_OUTLINE,
            width=max(1, round(scale)),
        )
    image = Image.alpha_composite(image, overlay).convert("RGB")
    if region.rotation:
        image = image.rotate(-region.rotation, expand=True)  # PIL turns counter-clockwise
    return image


def _stack(images: list[Image.Image]) -> Image.Image:
    if len(images) == 1:
        return images[0]
    width = max(image.width for image in images)
    height = sum(image.height for image in images) + PAGE_GAP_PX * (len(images) - 1)
    canvas = Image.new("RGB", (width, height), PAGE_GAP_COLOR)
    y = 0
    for image in images:
        canvas.paste(image, (0, y))
        y += image.height + PAGE_GAP_PX
    return canvas


def _encode(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
