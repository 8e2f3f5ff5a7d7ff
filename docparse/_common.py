"""Helpers shared by several parsers: GFM tables, zip-bomb checks, text decoding, numbered
headings, and re-encoding images as JPEG assets."""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from PIL import Image, UnidentifiedImageError

from .limits import MB, ParseLimits
from .types import Block, ParsedImage, ParseError

# --- GFM tables -------------------------------------------------------------------------------

_CELL_BREAKS = re.compile(r"\s*[\r\n]+\s*")


def gfm_cell(value: object) -> str:
    """One table cell as GFM text: a pipe or a newline would break the row."""
    if value is None:
        return ""
    text = str(value).strip()
    text = _CELL_BREAKS.sub(" ", text)
    return text.replace("\\", "\\\\").replace("|", "\\|")


def gfm_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def gfm_header(cells: Sequence[str], width: int | None = None) -> str:
    width = max(width or 0, len(cells), 1)
    padded = list(cells) + [""] * (width - len(cells))
    return gfm_row(padded) + "\n" + gfm_row(["---"] * width)


def table_from_rows(rows: Sequence[Sequence[object]]) -> tuple[str, tuple[str, ...]]:
    """GFM header (first non-empty row) and data rows of a small in-memory table."""
    cleaned = [[gfm_cell(cell) for cell in row] for row in rows]
    cleaned = [row for row in cleaned if any(row)]
    if not cleaned:
        return "", ()
    width = max(len(row) for row in cleaned)
    padded = [row + [""] * (width - len(row)) for row in cleaned]
    return gfm_header(padded[0], width), tuple(gfm_row(row) for row in padded[1:])


# --- ZIP containers (DOCX / XLSX / PPTX) ------------------------------------------------------

# What zipfile raises for an archive it cannot open: besides BadZipFile, a central directory
# declaring a newer ZIP version is NotImplementedError.
ZIP_OPEN_ERRORS: tuple[type[Exception], ...] = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    NotImplementedError,
    OSError,
)
_READABLE_COMPRESSION = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
_ENCRYPTED = 0x01
_COMPRESSED_PATCH = 0x20
_STRONG_ENCRYPTION = 0x40


def unreadable_zip_member(member: zipfile.ZipInfo) -> str | None:
    """Why zipfile would refuse to read this member, from its central directory entry.

    zipfile opens such an archive but raises RuntimeError (encrypted) or NotImplementedError
    (other compression methods, patch data) only when the member is read, deep inside the
    Office libraries, which read every member of a package.
    """
    if member.flag_bits & (_ENCRYPTED | _STRONG_ENCRYPTION):
        return "已加密"
    if member.flag_bits & _COMPRESSED_PATCH:
        return "不支持的补丁数据"
    if member.compress_type not in _READABLE_COMPRESSION:
        return f"不支持的压缩方式 {member.compress_type}"
    return None


def check_archive(data: bytes, *, limits: ParseLimits, kind: str) -> None:
    """Refuse a zip bomb by its declared sizes before a library inflates anything.

    Python's zipfile never returns more than a member's declared size (a lie ends in a CRC
    error), so declared sizes bound what the Office libraries can actually read.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (*ZIP_OPEN_ERRORS, ValueError) as exc:
        raise ParseError(
            "corrupt_file", f"{kind} 文件已损坏，无法读取（{exc}）。请用 Office 重新保存后再上传。"
        ) from exc
    for member in members:
        problem = unreadable_zip_member(member)
        if problem:
            raise ParseError(
                "corrupt_file",
                f"{kind} 文件已损坏，无法读取（{member.filename}：{problem}）。"
                "请用 Office 重新保存后再上传。",
            )
    if len(members) > limits.max_archive_members:
        raise ParseError(
            "archive_too_large",
            f"{kind} 文件包含的内部文件过多（{len(members)} 个），疑似压缩炸弹，已拒绝处理。",
        )
    total = 0
    for member in members:
        if member.file_size > limits.max_archive_member_bytes:
            raise ParseError(
                "archive_too_large",
                f"{kind} 文件中的 {member.filename} 解压后达 {member.file_size // MB} MB，"
                f"超过单个部件 {limits.max_archive_member_bytes // MB} MB 的上限，"
                "疑似压缩炸弹，已拒绝处理。",
            )
        total += member.file_size
    if total > limits.max_total_uncompressed:
        raise ParseError(
            "archive_too_large",
            f"{kind} 文件解压后共 {total // MB} MB，"
            f"超过 {limits.max_total_uncompressed // MB} MB 的上限，疑似压缩炸弹，已拒绝处理。",
        )


# What python-docx, python-pptx and openpyxl let escape on a malformed package: broken XML
# (lxml's XMLSyntaxError and ElementTree's ParseError are SyntaxErrors), a missing part or
# relationship (KeyError), an out-of-range reference (IndexError), an unexpected element
# (AttributeError, TypeError, ValueError), no main part at all (openpyxl: OSError) or a damaged
# member (BadZipFile, zlib.error, EOFError, NotImplementedError for a ZIP feature zipfile lacks).
_MALFORMED_PACKAGE: tuple[type[Exception], ...] = (
    NotImplementedError,
    SyntaxError,
    KeyError,
    IndexError,
    AttributeError,
    TypeError,
    ValueError,
    OSError,
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
)


@contextmanager
def reading_office_file(kind: str, *library_errors: type[Exception]) -> Iterator[None]:
    """Turn a malformed package into `ParseError("corrupt_file")`.

    The libraries parse parts lazily, so a broken slide, sheet or style surfaces while the
    content is read, not when the file is opened: wrap all reading, not just the open call.
    """
    try:
        yield
    except (*_MALFORMED_PACKAGE, *library_errors) as exc:
        raise ParseError(
            "corrupt_file",
            f"{kind} 文件已损坏或格式不正确，无法读取（{type(exc).__name__}）。"
            "请用 Office 重新保存后再上传。",
        ) from exc


# --- Text decoding ----------------------------------------------------------------------------


def decode_text(data: bytes, *, hint: str | None) -> str:
    """Decode with the sniffed encoding, else UTF-8 (BOM tolerated), else GB18030.

    NUL characters are dropped: they carry no text and PostgreSQL refuses them in text columns.
    """
    candidates: list[str] = []
    if hint:
        candidates.append(
            "utf-8-sig" if hint.lower().replace("_", "-") in {"utf-8", "utf8"} else hint
        )
    candidates += ["utf-8-sig", "gb18030"]
    for encoding in dict.fromkeys(candidates):
        try:
            return data.decode(encoding).replace("\x00", "")
        except (UnicodeDecodeError, LookupError):
            continue
    raise ParseError(
        "text_decode_failed",
        "无法识别文本编码（已尝试 UTF-8 和 GB18030）。请将文件另存为 UTF-8 编码后再上传。",
    )


def normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


# --- Numbered headings ------------------------------------------------------------------------

_CN_NUM = "一二三四五六七八九十百千零〇两"
_HEADING_PATTERNS: tuple[tuple[str, re.Pattern[str], bool], ...] = (
    # (kind, pattern, strong): strong patterns are headings even when body text follows on the
    # next line; weak ones ("1. …") only when they stand alone, since lists look the same.
    ("chapter", re.compile(rf"^第[{_CN_NUM}\d]+[章篇部](?:\s|$|[：:、])"), True),
    ("section", re.compile(rf"^第[{_CN_NUM}\d]+节(?:\s|$|[：:、])"), True),
    ("article", re.compile(rf"^第[{_CN_NUM}\d]+条(?:\s|$)"), False),
    ("cn_enum", re.compile(rf"^[{_CN_NUM}]+[、．]\s*\S"), True),
    ("cn_paren", re.compile(rf"^[（(][{_CN_NUM}]+[）)]\s*\S"), True),
    ("num3", re.compile(r"^\d{1,2}\.\d{1,2}\.\d{1,2}\.?(?:\s+|、)\S"), True),
    ("num2", re.compile(r"^\d{1,2}\.\d{1,2}\.?(?:\s+|、)\S"), True),
    ("num1", re.compile(r"^\d{1,2}(?:[、．]|\.\s)\s*\S"), False),
)
_SENTENCE_PUNCT = tuple("。！？；，,!?;：:")
MAX_HEADING_CHARS = 40


@dataclass(frozen=True)
class HeadingMatch:
    kind: str
    strong: bool


def match_numbered_heading(line: str) -> HeadingMatch | None:
    """A short line that looks like a numbered heading ("第一章 总则", "1.2 范围", "一、目的")."""
    text = line.strip()
    if not text or len(text) > MAX_HEADING_CHARS or text.endswith(_SENTENCE_PUNCT) or "。" in text:
        return None
    for kind, pattern, strong in _HEADING_PATTERNS:
        if pattern.match(text):
            return HeadingMatch(kind, strong)
    return None


class HeadingLevels:
    """Levels by first appearance: the first numbering style seen is level 1, the next 2, …

    Documents differ in which styles they nest ("第一章 > 一、" or "一、 > （一）"), and the
    order in which styles first appear follows the nesting in practice.
    """

    def __init__(self) -> None:
        self._levels: dict[str, int] = {}

    def level(self, kind: str) -> int:
        if kind not in self._levels:
            self._levels[kind] = min(len(self._levels) + 1, 6)
        return self._levels[kind]


# --- Images -----------------------------------------------------------------------------------


class ImageSkipped(Exception):
    """An embedded image not worth keeping or not decodable; `warn` when staff should know."""

    def __init__(self, reason: str, *, warn: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.warn = warn


@dataclass(frozen=True)
class JpegImage:
    jpeg: bytes
    width: int
    height: int


def image_to_jpeg(image: Image.Image, *, limits: ParseLimits) -> JpegImage:
    """Re-encode a loaded image as RGB JPEG, scaled down to `max_image_side`."""
    if image.mode in {"RGBA", "LA", "PA"} or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, "white")
        background.paste(rgba, mask=rgba.getchannel("A"))
        image = background
    elif image.mode != "RGB":
        image = image.convert("RGB")
    if max(image.size) > limits.max_image_side:
        image = image.copy()
        image.thumbnail((limits.max_image_side, limits.max_image_side))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=85)
    return JpegImage(buffer.getvalue(), image.width, image.height)


def exceeds_pixel_limit(width: int, height: int) -> bool:
    """Pillow's decompression-bomb threshold, which it only warns about below twice the value."""
    limit = Image.MAX_IMAGE_PIXELS
    return limit is not None and width * height > limit


def embedded_image_to_jpeg(blob: bytes, *, limits: ParseLimits) -> JpegImage:
    """Decode an image embedded in an Office file, refusing tiny, huge or broken ones."""
    try:
        image = Image.open(io.BytesIO(blob))
    except Image.DecompressionBombError as exc:
        raise ImageSkipped(f"图片像素过多，已跳过（{exc}）", warn=True) from exc
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        # EMF/WMF and other vector formats Pillow cannot rasterise end here.
        raise ImageSkipped(
            f"无法识别的图片格式，已跳过（{type(exc).__name__}）", warn=True
        ) from exc
    with image:
        width, height = image.size
        if min(width, height) < limits.min_image_side:
            raise ImageSkipped("图片过小", warn=False)
        if exceeds_pixel_limit(width, height):
            raise ImageSkipped(f"图片像素过多（{width}×{height}），已跳过", warn=True)
        try:
            image.load()
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            raise ImageSkipped(
                f"图片数据已损坏，已跳过（{type(exc).__name__}）", warn=True
            ) from exc
        return image_to_jpeg(image, limits=limits)


def join_lines(lines: Iterable[str]) -> str:
    """Join visual lines of one paragraph: no space inside CJK text, one space between words."""
    out = ""
    for line in lines:
        line = line.strip()
        if not line:
            continue
        out += (" " if out and _needs_space(out[-1], line[0]) else "") + line
    return out


def _needs_space(before: str, after: str) -> bool:
    if not (before.isascii() and after.isascii()):
        return False
    return (before.isalnum() and after.isalnum()) or before in ",.;:!?"


# --- Nearby text for images -------------------------------------------------------------------

NEARBY_TEXT_CHARS = 300
CAPTION_PREFIXES = ("图", "Figure", "Fig.", "Fig ", "表", "Table")


def attach_nearby_text(
    blocks: list[Block], images: list[ParsedImage]
) -> tuple[list[Block], list[ParsedImage]]:
    """Give each image block the text around it: a caption just below it, else the paragraph
    just before it, else the one just after. Captioning and retrieval of images rely on it."""
    nearby_by_key: dict[str, str] = {}
    result = list(blocks)
    for index, block in enumerate(blocks):
        if block.kind != "image" or not block.image_keys:
            continue
        nearby = _nearby(blocks, index)
        result[index] = replace(block, text=nearby)
        for key in block.image_keys:
            nearby_by_key[key] = nearby
    updated = [
        replace(image, nearby_text=nearby_by_key[image.key])
        if nearby_by_key.get(image.key)
        else image
        for image in images
    ]
    return result, updated


def _nearby(blocks: list[Block], index: int) -> str:
    after = _neighbour_text(blocks, index, step=1)
    if after.startswith(CAPTION_PREFIXES):
        return after[:NEARBY_TEXT_CHARS]
    before = _neighbour_text(blocks, index, step=-1)
    return (before or after)[:NEARBY_TEXT_CHARS]


def _neighbour_text(blocks: list[Block], index: int, *, step: int) -> str:
    position = index + step
    while 0 <= position < len(blocks):
        block = blocks[position]
        if block.kind == "text" and block.text.strip():
            return block.text.strip()
        if block.kind == "table":
            return ""
        position += step
    return ""
