"""PDF via pypdfium2: text lines with bboxes, headings by font size, images, OCR for scans.

PDFium does no layout analysis, so lines come from its character stream (it inserts generated
line breaks between visual lines) and paragraphs from vertical gaps between lines. Tables are kept
as text lines: reliable table detection needs ruling-line analysis we do not attempt here.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field, replace

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image

from . import ocr
from ._common import (
    CAPTION_PREFIXES,
    NEARBY_TEXT_CHARS,
    HeadingLevels,
    ImageSkipped,
    exceeds_pixel_limit,
    image_to_jpeg,
    join_lines,
    match_numbered_heading,
)
from .limits import ParseLimits
from .types import BBox, Block, Locator, ParsedImage, ParseError, ParseResult

# A line this much larger than the body text, short and without closing punctuation, is a heading.
HEADING_SIZE_RATIO = 1.15
MAX_HEADING_LINE_CHARS = 60
# Sizes used by more than this share of all characters are body text, not headings.
MAX_HEADING_CHAR_SHARE = 0.3
OCR_DPI = 200
MAX_RENDER_SIDE_PX = 2500
# Consecutive OCR timeouts after which the remaining scanned pages are skipped.
MAX_OCR_TIMEOUTS = 3
# A full-page picture on a page without a text layer is the scan itself, not a figure.
SCAN_COVERAGE = 0.6
GARBLED_SHARE = 0.3
_SENTENCE_END = tuple("。！？；，,.!?;：:")


@dataclass(frozen=True)
class _Line:
    page: int
    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    size: float
    ocr: bool = False

    @property
    def height(self) -> float:
        return max(self.y1 - self.y0, 0.1)


@dataclass
class _Page:
    number: int
    lines: list[_Line] = field(default_factory=list)
    images: list[ParsedImage] = field(default_factory=list)
    height: float = 0.0


@dataclass
class _OcrBudget:
    enabled: bool
    seconds: float
    max_pages: int
    pages_done: int = 0
    consecutive_timeouts: int = 0
    # Pages without a text layer that were not read, by reason; reported once each.
    disabled: list[int] = field(default_factory=list)
    over_budget: list[int] = field(default_factory=list)
    timed_out: list[int] = field(default_factory=list)
    after_timeouts: list[int] = field(default_factory=list)

    def allows(self) -> bool:
        return self.pages_done < self.max_pages and not self.gave_up

    @property
    def gave_up(self) -> bool:
        return self.consecutive_timeouts >= MAX_OCR_TIMEOUTS

    @property
    def unread_for_time(self) -> list[int]:
        """Pages OCR did not finish reading in time, or gave up on after repeated timeouts."""
        return sorted(self.timed_out + self.after_timeouts)

    def warnings(self) -> list[str]:
        out: list[str] = []
        if self.disabled:
            out.append(
                f"{_pages(self.disabled)}没有文字层（可能是扫描件），OCR 未启用，未提取文字。"
            )
        if self.over_budget:
            out.append(f"{_pages(self.over_budget)}没有文字层，超出 OCR 页数或时间预算，未识别。")
        if self.timed_out:
            out.append(f"{_pages(self.timed_out)} OCR 超时（每页 {self.seconds:.0f} 秒），已跳过。")
        if self.after_timeouts:
            out.append(f"{_pages(self.after_timeouts)}因前面的页面连续 OCR 超时，未识别。")
        return out


def _pages(numbers: list[int], shown: int = 20) -> str:
    listed = "、".join(str(number) for number in numbers[:shown])
    more = f" 等 {len(numbers)} 页" if len(numbers) > shown else ""
    return f"第 {listed}{more} 页"


def parse_pdf(data: bytes, *, limits: ParseLimits) -> ParseResult:
    _check_complete(data)
    document = _open(data)
    try:
        return _parse_open_document(document, limits=limits)
    finally:
        document.close()


def _check_complete(data: bytes) -> None:
    # PDFium silently repairs truncated files and returns whatever pages survived; a cut-off
    # upload must fail loudly instead of becoming a half-indexed document.
    if b"%%EOF" not in data[-4096:]:
        raise ParseError(
            "pdf_corrupt", "PDF 文件不完整（可能上传中断或文件被截断），请重新导出或上传完整文件。"
        )


def _open(data: bytes) -> pdfium.PdfDocument:
    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if exc.err_code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY):
            raise ParseError("pdf_encrypted", "PDF 已加密，请先移除密码后再上传。") from exc
        raise ParseError(
            "pdf_corrupt", "PDF 文件已损坏，无法读取。请用 PDF 阅读器另存后重新上传。"
        ) from exc


def _parse_open_document(document: pdfium.PdfDocument, *, limits: ParseLimits) -> ParseResult:
    page_count = len(document)
    if page_count > limits.max_pages:
        raise ParseError(
            "too_many_pages",
            f"PDF 共 {page_count} 页，超过 {limits.max_pages} 页的上限，请拆分后上传。",
        )
    warnings: list[str] = []
    ocr_pages: list[int] = []
    budget = _OcrBudget(limits.ocr_enabled, limits.ocr_seconds_per_page, limits.max_ocr_pages)
    seen_images: set[str] = set()
    pages: list[_Page] = []
    image_count = 0
    for index in range(page_count):
        number = index + 1
        try:
            page = document[index]
        except pdfium.PdfiumError as exc:
            raise ParseError("pdf_corrupt", f"PDF 第 {number} 页已损坏，无法读取。") from exc
        try:
            parsed = _Page(number, height=page.get_height())
            parsed.lines = _text_lines(page, number)
            scanned = not parsed.lines
            if scanned:
                parsed.lines = _ocr_page(page, number, budget)
                if parsed.lines:
                    ocr_pages.append(number)
            remaining = limits.max_images - image_count
            parsed.images = _page_images(
                page,
                number,
                limits,
                warnings,
                seen_images,
                skip_scans=scanned,
                start=image_count,
                remaining=remaining,
            )
            image_count += len(parsed.images)
            pages.append(parsed)
        finally:
            page.close()
    warnings.extend(budget.warnings())
    if image_count >= limits.max_images:
        warnings.append(f"图片超过 {limits.max_images} 张，其余图片未提取。")

    _drop_running_lines(pages)
    blocks = _build_blocks(pages)
    if not any(block.kind == "text" and block.text for block in blocks):
        if budget.unread_for_time:
            # Not "no text": OCR did not get to finish, which on a busy machine says nothing
            # about the file. Worth another run later.
            raise ParseError(
                "ocr_timeout",
                f"PDF 没有文字层，{_pages(budget.unread_for_time)}的文字识别（OCR）超时"
                f"（每页 {budget.seconds:.0f} 秒），未能提取文字。",
                transient=True,
            )
        raise ParseError("no_text", _no_text_message(limits))
    return ParseResult(
        blocks=blocks,
        images=[image for page in pages for image in page.images],
        page_count=page_count,
        title=_title(document),
        warnings=warnings,
        ocr_pages=ocr_pages,
        ocr_timed_out_pages=budget.unread_for_time,
    )


def _no_text_message(limits: ParseLimits) -> str:
    if not limits.ocr_enabled:
        return (
            "PDF 中没有可提取的文字（可能是扫描件），且 OCR 未启用。"
            "请上传带文字层的 PDF 或启用 OCR。"
        )
    return "PDF 中没有可提取的文字，OCR 也未识别出文字。请确认文件不是空白页或图片过于模糊。"


def _title(document: pdfium.PdfDocument) -> str | None:
    title = (document.get_metadata_value("Title") or "").strip()
    return title or None


# --- Text layer -------------------------------------------------------------------------------


def _text_lines(page: pdfium.PdfPage, number: int) -> list[_Line]:
    textpage = page.get_textpage()
    try:
        left, _bottom, _right, top = page.get_cropbox()
        lines: list[_Line] = []
        current: list[tuple[str, float, float, float, float, float]] = []
        rect = pdfium_c.FS_RECTF()
        for index in range(textpage.count_chars()):
            char = chr(pdfium_c.FPDFText_GetUnicode(textpage, index) or 0xFFFD)
            if char in "\r\n":
                _flush_line(current, lines, number, left, top)
                continue
            if not pdfium_c.FPDFText_GetLooseCharBox(textpage, index, rect):
                continue
            size = pdfium_c.FPDFText_GetFontSize(textpage, index)
            current.append((char, rect.left, rect.bottom, rect.right, rect.top, size))
        _flush_line(current, lines, number, left, top)
    finally:
        textpage.close()
    if _is_garbled(lines):
        return []
    return lines


def _flush_line(current: list, lines: list[_Line], number: int, left: float, top: float) -> None:
    text = "".join(item[0] for item in current).strip()
    visible = [item for item in current if not item[0].isspace()]
    current.clear()
    if not text or not visible:
        return
    sizes = sorted(item[5] for item in visible)
    lines.append(
        _Line(
            page=number,
            text=text,
            x0=min(item[1] for item in visible) - left,
            y0=top - max(item[4] for item in visible),
            x1=max(item[3] for item in visible) - left,
            y1=top - min(item[2] for item in visible),
            size=round(sizes[len(sizes) // 2] * 2) / 2,
        )
    )


def _is_garbled(lines: list[_Line]) -> bool:
    """Text from a font without a usable Unicode map: OCR reads such a page better."""
    chars = [char for line in lines for char in line.text if not char.isspace()]
    if not chars:
        return False
    bad = sum(
        1 for char in chars if char == "\ufffd" or "\ue000" <= char <= "\uf8ff" or ord(char) < 32
    )
    return bad / len(chars) > GARBLED_SHARE


# --- OCR --------------------------------------------------------------------------------------


def _ocr_page(page: pdfium.PdfPage, number: int, budget: _OcrBudget) -> list[_Line]:
    if pdfium_c.FPDFPage_CountObjects(page) <= 0:
        return []  # a blank page: nothing to read, and no OCR budget spent on it
    if not budget.enabled:
        budget.disabled.append(number)
        return []
    if not budget.allows():
        (budget.after_timeouts if budget.gave_up else budget.over_budget).append(number)
        return []
    width, height = page.get_size()
    scale = min(OCR_DPI / 72, MAX_RENDER_SIDE_PX / max(width, height, 1))
    image = page.render(scale=scale).to_pil()
    budget.pages_done += 1
    try:
        found = ocr.recognize(image, timeout=budget.seconds)
    except ocr.OcrTimeout:
        budget.consecutive_timeouts += 1
        budget.timed_out.append(number)
        return []
    budget.consecutive_timeouts = 0
    lines: list[_Line] = []
    for row in ocr.group_rows(found):
        x0 = min(item.box[0] for item in row) / scale
        y0 = min(item.box[1] for item in row) / scale
        x1 = max(item.box[2] for item in row) / scale
        y1 = max(item.box[3] for item in row) / scale
        text = join_lines(item.text for item in row) if len(row) > 1 else row[0].text
        lines.append(_Line(number, text, x0, y0, x1, y1, size=round((y1 - y0) * 2) / 2, ocr=True))
    return lines


# --- Images -----------------------------------------------------------------------------------


def _page_images(
    page: pdfium.PdfPage,
    number: int,
    limits: ParseLimits,
    warnings: list[str],
    seen: set[str],
    *,
    skip_scans: bool,
    start: int,
    remaining: int,
) -> list[ParsedImage]:
    if remaining <= 0:
        return []
    left, bottom, right, top = page.get_cropbox()
    page_area = max((right - left) * (top - bottom), 1.0)
    found: list[ParsedImage] = []
    for obj in page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_IMAGE,), max_depth=4):
        if len(found) >= remaining:
            break
        try:
            px_width, px_height = obj.get_px_size()
            x0, y0, x1, y1 = obj.get_bounds()
        except pdfium.PdfiumError:
            continue
        if min(px_width, px_height) < limits.min_image_side:
            continue
        if x1 <= x0 or y1 <= y0:
            continue  # drawn with no area: invisible (and PDFium cannot render it)
        if skip_scans and (x1 - x0) * (y1 - y0) >= SCAN_COVERAGE * page_area:
            continue
        if exceeds_pixel_limit(px_width, px_height):
            warnings.append(f"第 {number} 页有一张图片像素过多（{px_width}×{px_height}），已跳过。")
            continue
        # Logos and backgrounds repeat on every page; keep the first copy only.
        digest = hashlib.sha1(bytes(obj.get_data())).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        try:
            pil = _image_pixels(obj)
        except ImageSkipped as skipped:
            warnings.append(f"第 {number} 页有一张图片{skipped.reason}。")
            continue
        jpeg = image_to_jpeg(pil, limits=limits)
        bbox = BBox(number, x0 - left, top - y1, x1 - left, top - y0)
        key = f"img-{start + len(found) + 1:04d}"
        found.append(
            ParsedImage(
                key=key,
                jpeg=jpeg.jpeg,
                width=jpeg.width,
                height=jpeg.height,
                page=number,
                bbox=bbox,
            )
        )
    return found


def _image_pixels(obj: pdfium.PdfImage) -> Image.Image:
    try:
        bitmap = obj.get_bitmap(render=False)
    except pdfium.PdfiumError:
        # Some colour spaces (e.g. indexed with exotic bases) only come out rendered.
        try:
            bitmap = obj.get_bitmap(render=True)
        except pdfium.PdfiumError as exc:
            raise ImageSkipped("无法解码，已跳过", warn=True) from exc
    return bitmap.to_pil().copy()


# --- Blocks -----------------------------------------------------------------------------------


RUNNING_MARGIN = 0.08  # top / bottom share of the page where headers and footers live
RUNNING_SHARE = 0.5  # on at least this share of the pages
_DIGITS = re.compile(r"\d+")


def _drop_running_lines(pages: list[_Page]) -> None:
    """Remove running headers and footers (e.g. "手册 · 第 3 页") so they do not land in the
    middle of chunks: lines near the top or bottom edge whose text, digits ignored, repeats on
    at least half of the pages."""
    if len(pages) < 3:
        return

    def margin_key(line: _Line, page: _Page) -> str | None:
        if page.height <= 0:
            return None
        near_edge = line.y1 <= page.height * RUNNING_MARGIN or line.y0 >= page.height * (1 - RUNNING_MARGIN)
        return _DIGITS.sub("#", "".join(line.text.split())) if near_edge else None

    pages_with: dict[str, set[int]] = {}
    for page in pages:
        for line in page.lines:
            key = margin_key(line, page)
            if key:
                pages_with.setdefault(key, set()).add(page.number)
    running = {key for key, numbers in pages_with.items() if len(numbers) >= RUNNING_SHARE * len(pages)}
    if not running:
        return
    for page in pages:
        page.lines = [line for line in page.lines if margin_key(line, page) not in running]


def _build_blocks(pages: list[_Page]) -> list[Block]:
    heading_levels = _heading_levels_by_size(pages)
    numbered = HeadingLevels() if not heading_levels else None
    blocks: list[Block] = []
    for page in pages:
        paragraphs = _paragraphs(page.lines, heading_levels)
        page_blocks: list[tuple[float, Block]] = []
        for lines, level in paragraphs:
            text = join_lines(line.text for line in lines)
            if not level and numbered is not None and len(lines) == 1 and not lines[0].ocr:
                match = match_numbered_heading(text)
                if match and match.strong:
                    level = numbered.level(match.kind)
            bbox = BBox(
                page.number,
                min(line.x0 for line in lines),
                min(line.y0 for line in lines),
                max(line.x1 for line in lines),
                max(line.y1 for line in lines),
            )
            block = Block(
                kind="text",
                text=text,
                heading_level=level,
                locator=Locator(page=page.number),
                bboxes=(bbox,),
            )
            page_blocks.append((bbox.y0, block))
        text_blocks = list(page_blocks)
        for index, image in enumerate(page.images):
            bbox = image.bbox or BBox(page.number, 0, 0, 0, 0)
            nearby = _nearby_text(bbox, text_blocks)
            page.images[index] = replace(image, nearby_text=nearby)
            block = Block(
                kind="image",
                text=nearby,
                locator=Locator(page=page.number),
                bboxes=(bbox,),
                image_keys=(image.key,),
            )
            position = next(
                (i for i, (y0, _) in enumerate(page_blocks) if y0 > bbox.y0), len(page_blocks)
            )
            page_blocks.insert(position, (bbox.y0, block))
        blocks.extend(block for _, block in page_blocks)
    return blocks


def _nearby_text(bbox: BBox, page_blocks: list[tuple[float, Block]]) -> str:
    """The closest paragraph vertically, preferring a caption ("图 1 …", "Figure 1 …")."""
    best: tuple[float, str] | None = None
    for _, block in page_blocks:
        if block.kind != "text" or not block.bboxes:
            continue
        other = block.bboxes[0]
        distance = max(0.0, other.y0 - bbox.y1, bbox.y0 - other.y1)
        if block.text.startswith(CAPTION_PREFIXES):
            distance /= 3
        if best is None or distance < best[0]:
            best = (distance, block.text)
    return best[1][:NEARBY_TEXT_CHARS] if best else ""


def _heading_levels_by_size(pages: list[_Page]) -> dict[float, int]:
    """Font size → heading level, from sizes clearly above the dominant body size."""
    weights: Counter[float] = Counter()
    for page in pages:
        for line in page.lines:
            if not line.ocr:
                weights[line.size] += len(line.text)
    if not weights:
        return {}
    total = sum(weights.values())
    body = weights.most_common(1)[0][0]
    candidates = sorted(
        (
            size
            for size, count in weights.items()
            if size >= body * HEADING_SIZE_RATIO and count / total <= MAX_HEADING_CHAR_SHARE
        ),
        reverse=True,
    )
    return {size: min(rank + 1, 6) for rank, size in enumerate(candidates)}


def _heading_level(line: _Line, heading_levels: dict[float, int]) -> int:
    if line.ocr or line.size not in heading_levels:
        return 0
    if len(line.text) > MAX_HEADING_LINE_CHARS or line.text.endswith(_SENTENCE_END):
        return 0
    return heading_levels[line.size]


def _paragraphs(
    lines: list[_Line], heading_levels: dict[float, int]
) -> list[tuple[list[_Line], int]]:
    """Consecutive lines of one size with small vertical gaps form a paragraph; headings stand
    alone (a multi-line heading of one size stays together)."""
    paragraphs: list[tuple[list[_Line], int]] = []
    for line in lines:
        level = _heading_level(line, heading_levels)
        if paragraphs:
            previous_lines, previous_level = paragraphs[-1]
            previous = previous_lines[-1]
            if level == previous_level and _continues(previous, line):
                previous_lines.append(line)
                continue
        paragraphs.append(([line], level))
    return paragraphs


def _continues(previous: _Line, line: _Line) -> bool:
    if abs(previous.size - line.size) > 0.1 * max(previous.size, line.size, 1.0):
        return False
    height = max(previous.height, line.height)
    gap = line.y0 - previous.y1
    # Loose char boxes of adjacent lines touch or overlap slightly; a blank line's worth of
    # space, or a jump back up (next column), starts a new paragraph.
    return -0.5 * height <= gap <= 0.5 * height
