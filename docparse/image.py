"""PNG / JPEG uploads: verified with Pillow, OCR'd into text blocks, kept as a JPEG asset."""

from __future__ import annotations

import io

from PIL import Image, ImageOps, UnidentifiedImageError

from . import ocr
from ._common import exceeds_pixel_limit, image_to_jpeg, join_lines
from .limits import ParseLimits
from .types import Block, ParsedImage, ParseError, ParseResult

IMAGE_KEY = "img-0001"
IMAGE_BLOCK_TEXT_CHARS = 300


def parse_image(data: bytes, *, limits: ParseLimits) -> ParseResult:
    image = _load(data)
    warnings: list[str] = []
    paragraphs: list[str] = []
    if limits.ocr_enabled:
        try:
            lines = ocr.recognize(image, timeout=limits.ocr_seconds_per_page)
        except ocr.OcrTimeout:
            lines = []
            warnings.append(
                f"图片文字识别超时（{limits.ocr_seconds_per_page:.0f} 秒），未提取文字。"
            )
        paragraphs = [
            "\n".join(join_lines(line.text for line in row) for row in paragraph)
            for paragraph in ocr.group_paragraphs(lines)
        ]
    if not any(paragraphs):
        if warnings:  # OCR ran out of time: says nothing about the image, worth another run
            raise ParseError("ocr_timeout", _no_text_message(limits, timed_out=True), transient=True)
        raise ParseError("no_text", _no_text_message(limits, timed_out=False))
    ocr_text = "\n".join(paragraphs)
    jpeg = image_to_jpeg(image, limits=limits)
    parsed_image = ParsedImage(
        key=IMAGE_KEY, jpeg=jpeg.jpeg, width=jpeg.width, height=jpeg.height, ocr_text=ocr_text
    )
    blocks = [Block(kind="image", text=ocr_text[:IMAGE_BLOCK_TEXT_CHARS], image_keys=(IMAGE_KEY,))]
    blocks += [Block(kind="text", text=text) for text in paragraphs if text]
    return ParseResult(
        blocks=blocks, images=[parsed_image], page_count=1, warnings=warnings, ocr_pages=[1]
    )


def _no_text_message(limits: ParseLimits, *, timed_out: bool) -> str:
    if not limits.ocr_enabled:
        return "图片需要文字识别（OCR）才能建立索引，但 OCR 未启用。"
    if timed_out:
        return "图片文字识别超时，未能提取文字。请裁剪或压缩图片后重新上传。"
    return "图片中未识别到文字，无法建立索引。请上传包含清晰文字的图片。"


def _load(data: bytes) -> Image.Image:
    try:
        with Image.open(io.BytesIO(data)) as probe:
            width, height = probe.size
            if exceeds_pixel_limit(width, height):
                raise _too_large(width, height)
            probe.verify()
        image = Image.open(io.BytesIO(data))
        image.load()
    except Image.DecompressionBombError as exc:
        raise ParseError(
            "image_too_large", "图片像素过多，疑似解压炸弹，已拒绝处理。请缩小图片后上传。"
        ) from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ParseError(
            "image_corrupt", "图片已损坏或不完整，无法读取，请重新导出后上传。"
        ) from exc
    # Phone photos of documents are often stored sideways with an EXIF rotation flag.
    try:
        return ImageOps.exif_transpose(image) or image
    except (OSError, ValueError, SyntaxError):
        return image


def _too_large(width: int, height: int) -> ParseError:
    return ParseError(
        "image_too_large",
        f"图片尺寸 {width}×{height} 像素过大，疑似解压炸弹，已拒绝处理。请缩小图片后上传。",
    )
