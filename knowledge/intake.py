"""The checks every file staff give the product passes before anything parses it: documents,
item imports, evaluation-set imports, and whatever takes a file next.

A file's size is bounded by the purpose it is given for; an Office package (a ZIP) is also
bounded by what it declares it unpacks to, by its compression ratio and by its number of
entries, read from its central directory without inflating anything. Python's zipfile never
returns more than an entry's declared size (a lie ends in a CRC error), so the declared sizes
bound what openpyxl, python-docx or python-pptx can read afterwards.

Without this, a 167 KB workbook whose string table unpacks to 68 MB kept openpyxl busy for most
of a minute and a web process 400 MB larger: the item import refused it only after parsing.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from typing import BinaryIO

import openpyxl
from django.conf import settings
from django.utils.translation import gettext as _
from openpyxl.utils.exceptions import InvalidFileException

from docparse._common import ZIP_OPEN_ERRORS, unreadable_zip_member
from ragsite.errors import ValidationFailed

MB = 2**20
ZIP_MAGIC = b"PK\x03\x04"
# Below this an archive's ratio is not held against it: small XML parts compress 50–100×.
RATIO_FLOOR_BYTES = 10 * MB


class FileRejected(ValidationFailed):
    """A file refused before anything is stored or parsed."""


@dataclass(frozen=True)
class IntakeLimits:
    """What one purpose accepts. `max_unpacked_bytes` bounds an archive's declared contents."""

    max_bytes: int
    max_unpacked_bytes: int

    @classmethod
    def for_documents(cls) -> IntakeLimits:
        return cls(max_bytes=settings.RAG_MAX_UPLOAD_BYTES,
                   max_unpacked_bytes=settings.RAG_MAX_ARCHIVE_UNCOMPRESSED_BYTES)

    @classmethod
    def for_imports(cls) -> IntakeLimits:
        """Tables staff import (items, evaluation cases): read whole in the web process, so
        held to what such a table needs."""
        return cls(max_bytes=settings.RAG_MAX_IMPORT_BYTES,
                   max_unpacked_bytes=settings.RAG_MAX_IMPORT_UNPACKED_BYTES)


def check_file(*, name: str, data: bytes | BinaryIO, limits: IntakeLimits) -> None:
    """FileRejected (with a stable code) unless the file may be parsed. A stream is read from
    its start and left there."""
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    stream.seek(0, io.SEEK_END)
    size = stream.tell()
    stream.seek(0)
    if not size:
        raise FileRejected(_("文件为空。"), code="empty_file")
    if size > limits.max_bytes:
        raise FileRejected(
            _("文件大小 %(size).1f MB 超过上限 %(limit).1f MB。")
            % {"size": size / MB, "limit": limits.max_bytes / MB},
            code="file_too_large",
        )
    head = stream.read(len(ZIP_MAGIC))
    stream.seek(0)
    if head == ZIP_MAGIC:
        check_archive(stream, limits=limits, name=name)


def check_archive(stream: BinaryIO, *, limits: IntakeLimits, name: str = "") -> list[zipfile.ZipInfo]:
    """The archive's entries, or FileRejected when they are too many, unpack to too much, at a
    ratio only a bomb has, or cannot be read by zipfile (which the Office libraries would meet
    deep inside their parsing)."""
    try:
        with zipfile.ZipFile(stream) as archive:
            members = archive.infolist()
    except (*ZIP_OPEN_ERRORS, ValueError) as exc:
        raise FileRejected(_("压缩包已损坏，无法读取：%(error)s") % {"error": exc}, code="corrupt_file") from exc
    finally:
        stream.seek(0)
    if len(members) > settings.RAG_MAX_ARCHIVE_MEMBERS:
        raise FileRejected(
            _("文档包含的内部文件过多（%(count)d 个），疑似压缩炸弹。") % {"count": len(members)},
            code="archive_too_large",
        )
    unpacked = sum(member.file_size for member in members)
    packed = sum(member.compress_size for member in members) or 1
    if unpacked > limits.max_unpacked_bytes:
        raise FileRejected(
            _("文档解压后过大（%(size)d MB，上限 %(limit)d MB），疑似压缩炸弹。")
            % {"size": unpacked // MB, "limit": limits.max_unpacked_bytes // MB},
            code="archive_too_large",
        )
    if unpacked > RATIO_FLOOR_BYTES and unpacked / packed > settings.RAG_MAX_ARCHIVE_RATIO:
        raise FileRejected(
            _("文档压缩比异常（%(ratio)d 倍），疑似压缩炸弹。") % {"ratio": unpacked // packed},
            code="archive_too_large",
        )
    for member in members:
        problem = unreadable_zip_member(member)
        if problem:
            raise FileRejected(
                _("压缩包已损坏，无法读取：%(error)s") % {"error": f"{member.filename}：{problem}"},
                code="corrupt_file",
            )
    return members


# What openpyxl lets escape on a file that is not a workbook it can read: a damaged package
# (BadZipFile, a missing part: KeyError), one it does not know (InvalidFileException), broken
# XML (lxml's and ElementTree's parse errors are SyntaxErrors) or an unexpected value.
_UNREADABLE_WORKBOOK: tuple[type[Exception], ...] = (
    zipfile.BadZipFile, InvalidFileException, KeyError, IndexError, SyntaxError, TypeError, ValueError, OSError,
)


def read_first_sheet(data: bytes, *, name: str, max_rows: int, code: str) -> list[tuple[object, ...]]:
    """The values of the first `max_rows` rows of an XLSX workbook's first sheet, for a file
    `check_file` let through. FileRejected with `code` when openpyxl cannot read it."""
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except _UNREADABLE_WORKBOOK as exc:
        raise FileRejected(_("%(name)s 不是可读取的 XLSX 文件：%(error)s") % {"name": name, "error": exc},
                           code=code) from exc
    try:
        if not workbook.worksheets:
            return []
        rows = workbook.worksheets[0].iter_rows(values_only=True)
        return [tuple(row) for _number, row in zip(range(max_rows), rows)]
    except _UNREADABLE_WORKBOOK as exc:
        raise FileRejected(_("%(name)s 不是可读取的 XLSX 文件：%(error)s") % {"name": name, "error": exc},
                           code=code) from exc
    finally:
        workbook.close()
