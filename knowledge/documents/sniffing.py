"""Decide a file's type from its bytes, never from the name or the client's content type.

The name only disambiguates between text formats (Markdown, CSV, HTML, plain text) that the
bytes cannot tell apart, and it is checked for lies: a `.pdf` whose bytes are not a PDF is
refused rather than parsed as something else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import BinaryIO

from django.utils.translation import gettext as _

from knowledge.intake import FileRejected, IntakeLimits, check_archive

SNIFF_BYTES = 64 * 1024

MIME_TYPES = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "csv": "text/csv",
    "md": "text/markdown",
    "html": "text/html",
    "txt": "text/plain",
    "png": "image/png",
    "jpeg": "image/jpeg",
}

# Extensions that name a binary format: the bytes must agree with them.
BINARY_EXTENSIONS = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".xlsx": "xlsx",
    ".pptx": "pptx",
    ".png": "png",
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
}
TEXT_EXTENSIONS = {
    ".md": "md",
    ".markdown": "md",
    ".csv": "csv",
    ".html": "html",
    ".htm": "html",
    ".txt": "txt",
    ".text": "txt",
    ".log": "txt",
}
LEGACY_OFFICE = {".doc", ".xls", ".ppt"}
OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"

SUPPORTED_TYPES_LABEL = "PDF、DOCX、XLSX、CSV、PPTX、Markdown、HTML、TXT、PNG、JPEG"


@dataclass(frozen=True)
class SniffResult:
    file_type: str
    mime_type: str
    text_encoding: str | None = None


def sniff(stream: BinaryIO, *, filename: str) -> SniffResult:
    """Return the file's real type or raise `FileRejected` with a stable code."""
    stream.seek(0)
    head = stream.read(SNIFF_BYTES)
    stream.seek(0)
    suffix = PurePath(filename or "").suffix.lower()

    if not head:
        raise FileRejected(_("文件为空。"), code="empty_file")

    detected = _detect_binary(head, stream)
    if detected is None and head.startswith(OLE2_MAGIC):
        raise FileRejected(
            _("不支持旧版 Office 格式或已加密的 Office 文件，请另存为 DOCX / XLSX / PPTX 后上传。"),
            code="unsupported_file_type",
        )
    if detected is None and suffix in LEGACY_OFFICE:
        raise FileRejected(
            _("不支持旧版 Office 格式（%(ext)s），请另存为 DOCX / XLSX / PPTX 后上传。")
            % {"ext": suffix},
            code="unsupported_file_type",
        )

    claimed = BINARY_EXTENSIONS.get(suffix)
    if claimed and detected != claimed:
        raise FileRejected(
            _("文件扩展名为 %(ext)s，但内容不是 %(kind)s 文件。")
            % {"ext": suffix, "kind": claimed.upper()},
            code="type_mismatch",
        )
    if detected is not None:
        return SniffResult(detected, MIME_TYPES[detected])

    encoding = _text_encoding(head)
    if encoding is None:
        raise FileRejected(
            _("无法识别的文件类型。支持的格式：%(types)s。") % {"types": SUPPORTED_TYPES_LABEL},
            code="unsupported_file_type",
        )
    text_type = TEXT_EXTENSIONS.get(suffix)
    if text_type is None:
        if suffix and suffix not in TEXT_EXTENSIONS:
            raise FileRejected(
                _("不支持的文件类型 %(ext)s。支持的格式：%(types)s。")
                % {"ext": suffix, "types": SUPPORTED_TYPES_LABEL},
                code="unsupported_file_type",
            )
        text_type = "html" if _looks_like_html(head, encoding) else "txt"
    return SniffResult(text_type, MIME_TYPES[text_type], encoding)


def _detect_binary(head: bytes, stream: BinaryIO) -> str | None:
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"PK\x03\x04"):
        return _detect_ooxml(stream)
    return None


def _detect_ooxml(stream: BinaryIO) -> str:
    names = {member.filename for member in check_archive(stream, limits=IntakeLimits.for_documents())}
    if "word/document.xml" in names:
        return "docx"
    if "xl/workbook.xml" in names:
        return "xlsx"
    if "ppt/presentation.xml" in names:
        return "pptx"
    raise FileRejected(
        _("这是一个 ZIP 压缩包，但不是 DOCX / XLSX / PPTX 文档。"), code="unsupported_file_type"
    )


def _text_encoding(head: bytes) -> str | None:
    if b"\x00" in head:
        return None
    # A multi-byte character may be cut at the end of the sniffed window; ignore that tail.
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            head.decode(encoding)
            return "utf-8" if encoding == "utf-8-sig" else encoding
        except UnicodeDecodeError as exc:
            if len(head) == SNIFF_BYTES and exc.start >= len(head) - 4:
                return "utf-8" if encoding == "utf-8-sig" else encoding
    return None


def _looks_like_html(head: bytes, encoding: str) -> bool:
    text = head[:2048].decode(encoding, errors="ignore").lstrip().lower()
    return text.startswith("<!doctype html") or text.startswith("<html")
