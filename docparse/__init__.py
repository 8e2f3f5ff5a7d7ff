"""Turn an uploaded file's bytes into the common `ParseResult`, one module per format.

The file type comes from `knowledge.documents.sniffing` (decided from the bytes at upload); parsers trust it
and only fail with `ParseError` (stable `code`, Chinese message for staff).
"""

from __future__ import annotations

from collections.abc import Callable

from .limits import ParseLimits
from .types import ParseError, ParseResult

__all__ = ["SUPPORTED_FILE_TYPES", "ParseLimits", "parse_document"]

SUPPORTED_FILE_TYPES = ("pdf", "docx", "xlsx", "csv", "pptx", "md", "html", "txt", "png", "jpeg")


def parse_document(
    data: bytes,
    *,
    file_type: str,
    filename: str,
    limits: ParseLimits,
    text_encoding: str | None = None,
) -> ParseResult:
    if not data:
        raise ParseError("empty_file", "文件为空。")
    parser = _parser_for(file_type)
    result = parser(data, filename=filename, limits=limits, text_encoding=text_encoding)
    if not any(block.kind in ("text", "table") and block.text.strip() for block in result.blocks):
        raise ParseError("no_text", "文档中没有可提取的文字内容，请确认文件不是空白文档。")
    return result


_Parser = Callable[..., ParseResult]


def _parser_for(file_type: str) -> _Parser:
    # Imported lazily: each format pulls in a heavy library (PDFium, lxml, ONNX runtime …).
    if file_type == "pdf":
        from .pdf import parse_pdf

        return lambda data, *, limits, **_: parse_pdf(data, limits=limits)
    if file_type == "docx":
        from .docx import parse_docx

        return lambda data, *, limits, **_: parse_docx(data, limits=limits)
    if file_type == "xlsx":
        from .spreadsheet import parse_xlsx

        return lambda data, *, limits, **_: parse_xlsx(data, limits=limits)
    if file_type == "csv":
        from .spreadsheet import parse_csv

        return lambda data, *, limits, text_encoding, **_: parse_csv(
            data, limits=limits, text_encoding=text_encoding
        )
    if file_type == "pptx":
        from .pptx import parse_pptx

        return lambda data, *, limits, **_: parse_pptx(data, limits=limits)
    if file_type == "md":
        from .markdown import parse_markdown

        return lambda data, *, text_encoding, **_: parse_markdown(data, text_encoding=text_encoding)
    if file_type == "html":
        from .html import parse_html

        return lambda data, *, text_encoding, **_: parse_html(data, text_encoding=text_encoding)
    if file_type == "txt":
        from .text import parse_text

        return lambda data, *, text_encoding, **_: parse_text(data, text_encoding=text_encoding)
    if file_type in ("png", "jpeg"):
        from .image import parse_image

        return lambda data, *, limits, **_: parse_image(data, limits=limits)
    raise ParseError(
        "unsupported_file_type",
        f"不支持的文件类型：{file_type}。支持的格式：PDF、DOCX、XLSX、CSV、PPTX、Markdown、HTML、TXT、PNG、JPEG。",
    )
