"""Property tests: hostile bytes through the upload path (validate, sniff, parse, chunk).

Whatever the bytes, an upload ends as a parsed document or a clean coded refusal
(`ValidationFailed` at upload, `ParseError` in the worker), never another exception and never a
hang. Inputs are random bytes, random bytes behind each format's magic number, and small valid
files of every format (built here) with bytes flipped, cut, inserted or deleted, either in the
raw file or inside one member of an Office package, so that the XML libraries see broken parts.
"""

from __future__ import annotations

import contextlib
import io
import re
import signal
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import replace
from functools import cache

import docx
import openpyxl
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pptx import Presentation
from pptx.util import Inches

from docparse.chunking import chunk_document
from knowledge.documents.ingestion.runner import parse_limits
from docparse import ParseLimits, parse_document
from docparse.types import ParseError, ParseResult
from knowledge.documents.services import _check_uploads
from ragsite.errors import ValidationFailed

from .factories import PdfPicture, PdfText, build_pdf, encode, picture

# Bounded and reproducible for CI: a fixed example sequence, no example database on disk.
settings.register_profile(
    "parsing_properties",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile("parsing_properties")

# Every code an upload or a parse may refuse with; a new one must be added here on purpose.
UPLOAD_CODES = {
    "empty_file",
    "file_too_large",
    "unsupported_file_type",
    "type_mismatch",
    "corrupt_file",
    "archive_too_large",
}
PARSE_CODES = {
    "empty_file",
    "no_text",
    "unsupported_file_type",
    "corrupt_file",
    "archive_too_large",
    "csv_invalid",
    "html_too_complex",
    "image_corrupt",
    "image_too_large",
    "pdf_corrupt",
    "pdf_encrypted",
    "text_decode_failed",
    "too_many_cells",
    "too_many_pages",
    "too_many_rows",
}
# One parse of a small file takes well under a second; this long means a hang.
HANG_SECONDS = 20
MAX_FUZZ_BYTES = 4096


class Hang(Exception):
    pass


@contextlib.contextmanager
def bounded_time(seconds: int) -> Iterator[None]:
    def on_alarm(signum, frame):
        raise Hang(f"no outcome after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def fuzz_limits() -> ParseLimits:
    # OCR is model inference with its own time bound (tests/docparse/test_ocr.py);
    # here it would only spend seconds per example on noise images.
    return replace(parse_limits(), ocr_enabled=False)


def upload(data: bytes, filename: str) -> ParseResult | None:
    """The upload path: the same checks the upload service runs, then the worker's parse and
    chunking. None when the upload or the parse refuses the file with a known code."""
    with bounded_time(HANG_SECONDS):
        try:
            (checked,) = _check_uploads([SimpleUploadedFile(filename, data)])
        except ValidationFailed as exc:
            assert exc.code in UPLOAD_CODES, exc.code
            assert str(exc.message).strip()
            return None
        sniffed = checked.sniffed
        try:
            result = parse_document(
                data,
                file_type=sniffed.file_type,
                filename=filename,
                limits=fuzz_limits(),
                text_encoding=sniffed.text_encoding,
            )
        except ParseError as exc:
            assert exc.code in PARSE_CODES, exc.code
            assert exc.message.strip()
            return None
        drafts = chunk_document(result, document_key="fuzz", chunk_tokens=128, overlap_tokens=16)
    # parse_document refuses documents without text, so a parsed upload always yields chunks.
    assert drafts
    assert all(draft.content.strip() for draft in drafts)
    return result


# --- Valid small files of every format, built once ------------------------------------------


def _saved(document) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


_TIMESTAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def _reproducible(package: bytes) -> bytes:
    """The Office package with its save times fixed, so that every run mutates the same bytes
    and the examples below keep pointing at the same ZIP structures."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(package)) as source, zipfile.ZipFile(
        buffer, "w", compression=zipfile.ZIP_DEFLATED
    ) as archive:
        for info in source.infolist():
            content = _TIMESTAMP.sub(b"2024-01-01T00:00:00Z", source.read(info))
            fixed = zipfile.ZipInfo(info.filename, date_time=(2024, 1, 1, 0, 0, 0))
            archive.writestr(fixed, content, zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


@cache
def valid_files() -> dict[str, bytes]:
    png = encode(picture((120, 80)), "PNG")
    jpeg = encode(picture((120, 80)), "JPEG")

    document = docx.Document()
    document.core_properties.title = "差旅制度"
    document.add_heading("第一章 总则", level=1)
    document.add_paragraph("员工出差前需要提交申请。Travel needs approval.")
    table = document.add_table(rows=2, cols=2)
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            cell.text = f"格{r}{c}"
    document.add_picture(io.BytesIO(png))
    document.add_paragraph("图 1 流程")

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "费用"
    sheet.append(["项目", "金额", "日期"])
    sheet.append(["住宿", 300.5, "2024-01-02"])
    sheet.append(["交通", 120, None])
    workbook.create_sheet("备注").append(["说明"])

    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "季度总结"
    slide.placeholders[1].text_frame.text = "收入增长\n成本下降"
    slide.notes_slide.notes_text_frame.text = "强调增长"
    second = presentation.slides.add_slide(presentation.slide_layouts[5])
    second.shapes.title.text = "明细"
    grid = second.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    for r in range(2):
        for c in range(2):
            grid.cell(r, c).text = f"值{r}{c}"
    second.shapes.add_picture(io.BytesIO(png), Inches(1), Inches(4))

    pdf = build_pdf(
        [
            [
                PdfText("第一章 总则", 72, 760, 18),
                PdfText("本制度适用于全体员工。", 72, 730, 12),
                PdfText("Second paragraph.", 72, 700, 12),
                PdfPicture(jpeg, 120, 80, 72, 500, 120, 80),
            ],
            [PdfText("Page two.", 72, 700, 12)],
        ]
    )
    return {
        "doc.pdf": pdf,
        "doc.docx": _reproducible(_saved(document)),
        "book.xlsx": _reproducible(_saved(workbook)),
        "deck.pptx": _reproducible(_saved(presentation)),
        "photo.png": png,
        "photo.jpg": jpeg,
        "table.csv": "项目,金额\n住宿,300\n\"交通, 市内\",120\n".encode(),
        "notes.md": (
            "---\ntitle: x\n---\n# 标题\n\n正文 **粗体**。\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\n"
            "```py\ncode()\n```\n\n![图](http://x/y.png)\n"
        ).encode(),
        "page.html": (
            "<!doctype html><html><head><title>页</title><script>x()</script></head><body>"
            "<h1>标题</h1><p>段落<br>换行</p><table><tr><th colspan=2>表头</th></tr>"
            "<tr><td>1</td><td>2</td></tr></table><img alt='图片说明' src='http://x'></body></html>"
        ).encode(),
        "readme.txt": "第一章 总则\n\n员工出差前需要提交申请。\n一、目的\n说明。\n".encode("gb18030"),
    }


def test_every_valid_file_parses():
    # given: the seeds the mutations start from must be good files, or mutating them tests
    # nothing but the refusal of garbage
    files = valid_files()

    # when
    results = {name: upload(data, name) for name, data in files.items()}

    # then: images need OCR for text, which the fuzz limits turn off
    refused = sorted(name for name, result in results.items() if result is None)
    assert refused == ["photo.jpg", "photo.png"]


# --- Mutations --------------------------------------------------------------------------------


@st.composite
def mutations(draw) -> list[tuple[str, float, bytes]]:
    operation = st.tuples(
        st.sampled_from(["flip", "insert", "delete", "truncate", "overwrite"]),
        st.floats(min_value=0, max_value=1, allow_nan=False),
        st.binary(min_size=1, max_size=16),
    )
    return draw(st.lists(operation, min_size=1, max_size=4))


def mutate(data: bytes, operations: list[tuple[str, float, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, where, payload in operations:
        if not out:
            break
        at = min(int(where * len(out)), len(out) - 1)
        if kind == "flip":
            out[at] ^= payload[0] or 0xFF
        elif kind == "insert":
            out[at:at] = payload
        elif kind == "delete":
            del out[at : at + len(payload)]
        elif kind == "truncate":
            del out[at:]
        else:
            out[at : at + len(payload)] = payload
    return bytes(out)


def mutate_member(data: bytes, index: int, operations: list[tuple[str, float, bytes]]) -> bytes:
    """The package with one member's bytes mutated and re-zipped with a valid CRC, so the
    Office library reads the broken part instead of the ZIP layer refusing it."""
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        members = source.infolist()
        target = members[index % len(members)]
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for info in members:
                content = source.read(info)
                if info.filename == target.filename:
                    content = mutate(content, operations)
                archive.writestr(info.filename, content)
    return buffer.getvalue()


MAGIC = {
    "doc.pdf": b"%PDF-1.7\n",
    "photo.png": b"\x89PNG\r\n\x1a\n",
    "photo.jpg": b"\xff\xd8\xff",
    "doc.docx": b"PK\x03\x04",
    "blob.bin": b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",  # OLE2: legacy Office
    "notes.md": b"",
    "page.html": b"<html>",
    "table.csv": b"",
    "readme.txt": b"",
    "unnamed": b"",
}


@settings(PROFILE, max_examples=200)
@given(
    filename=st.sampled_from(sorted(MAGIC)),
    body=st.binary(max_size=MAX_FUZZ_BYTES),
)
@example(filename="doc.pdf", body=b"")
@example(filename="unnamed", body=b"\x00")
def test_random_bytes_are_parsed_or_refused_with_a_code(filename, body):
    # when / then
    upload(MAGIC[filename] + body, filename)


# Found by the test below: zipfile raised NotImplementedError past every handler, at upload
# (a central directory claiming ZIP version 23.5) and in the parsers (compression method 0x100).
ZIP_VERSION_FLIP = ("deck.pptx", [("flip", 0.9975696412419857, b"\x00")])
ZIP_COMPRESSION_FLIPS = [
    ("deck.pptx", [("flip", 0.9296875, b"\x00")]),
    ("book.xlsx", [("flip", 0.951171875, b"\x00")]),
]


@settings(PROFILE, max_examples=250)
@given(name=st.sampled_from(sorted(valid_files())), operations=mutations())
@example(*ZIP_VERSION_FLIP)
@example(*ZIP_COMPRESSION_FLIPS[0])
@example(*ZIP_COMPRESSION_FLIPS[1])
def test_mutated_files_are_parsed_or_refused_with_a_code(name, operations):
    # given
    data = mutate(valid_files()[name], operations)

    # when / then
    upload(data, name)


@settings(PROFILE, max_examples=100)
@given(
    name=st.sampled_from(["doc.docx", "book.xlsx", "deck.pptx", "doc.pdf"]),
    operations=mutations(),
)
@example(*ZIP_COMPRESSION_FLIPS[0])
@example(*ZIP_COMPRESSION_FLIPS[1])
def test_parsers_refuse_mutated_files_with_a_code_even_unsniffed(name, operations):
    # given: files stored before a sniffing rule existed reach the parser unchecked
    data = mutate(valid_files()[name], operations)
    file_type = name.rsplit(".", 1)[1]

    # when
    with bounded_time(HANG_SECONDS):
        try:
            parse_document(data, file_type=file_type, filename=name, limits=fuzz_limits())
        except ParseError as exc:
            # then
            assert exc.code in PARSE_CODES, exc.code


def zipfile_cannot_read(data: bytes) -> bool:
    """Whether zipfile opens the archive but refuses to read one of its members, or refuses
    to open it for a feature it lacks (not for damage)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except NotImplementedError:
        return True
    with archive:
        for name in archive.namelist():
            try:
                archive.read(name)
            except (NotImplementedError, RuntimeError):
                return True
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError):
                continue
    return False


@pytest.mark.parametrize(("name", "operations"), [ZIP_VERSION_FLIP, *ZIP_COMPRESSION_FLIPS])
def test_the_kept_examples_still_hit_what_zipfile_cannot_read(name, operations):
    # then: if the seed files change, these examples must be found again, not kept stale
    assert zipfile_cannot_read(mutate(valid_files()[name], operations))


def with_central_directory_field(data: bytes, offset: int, value: bytes) -> bytes:
    """`value` written at `offset` of every central directory entry (ZIP spec 4.3.12)."""
    out = bytearray(data)
    at = out.find(b"PK\x01\x02")
    while at != -1:
        out[at + offset : at + offset + len(value)] = value
        at = out.find(b"PK\x01\x02", at + 4)
    return bytes(out)


UNREADABLE_ZIPS = {
    "newer ZIP version": (6, b"\xff\x00"),
    "encrypted": (8, b"\x01\x00"),
    "compressed patch data": (8, b"\x20\x00"),
    "strong encryption": (8, b"\x41\x00"),
    "unknown compression": (10, b"\x63\x00"),
}


@pytest.mark.parametrize("name", ["doc.docx", "book.xlsx", "deck.pptx"])
@pytest.mark.parametrize("feature", sorted(UNREADABLE_ZIPS))
def test_office_files_zipfile_cannot_read_are_refused_at_upload_and_by_the_parser(name, feature):
    # given
    data = with_central_directory_field(valid_files()[name], *UNREADABLE_ZIPS[feature])
    assert zipfile_cannot_read(data)

    # when
    with pytest.raises(ValidationFailed) as at_upload:
        _check_uploads([SimpleUploadedFile(name, data)])
    with pytest.raises(ParseError) as in_worker:
        parse_document(data, file_type=name.rsplit(".", 1)[1], filename=name, limits=fuzz_limits())

    # then
    assert at_upload.value.code == "corrupt_file"
    assert in_worker.value.code == "corrupt_file"


@settings(PROFILE, max_examples=250)
@given(
    name=st.sampled_from(["doc.docx", "book.xlsx", "deck.pptx"]),
    member=st.integers(min_value=0, max_value=200),
    operations=mutations(),
)
def test_office_files_with_a_broken_part_are_parsed_or_refused_with_a_code(
    name, member, operations
):
    # given
    data = mutate_member(valid_files()[name], member, operations)

    # when / then
    upload(data, name)


@pytest.mark.parametrize("name", ["doc.docx", "book.xlsx", "deck.pptx"])
def test_office_member_mutation_keeps_the_package_readable(name):
    # given: the mutation helper must leave a ZIP the Office library opens, or the test above
    # would only ever exercise the ZIP layer
    data = mutate_member(valid_files()[name], 0, [("insert", 1.0, b" ")])

    # when
    result = upload(data, name)

    # then
    assert result is not None
