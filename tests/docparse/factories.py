"""Builders for test documents, all made in code so no binary fixtures live in the repo."""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field

from PIL import Image, ImageDraw, ImageFont

# --- PDF --------------------------------------------------------------------------------------
# Hand-written PDFs: no PDF writer with CJK support is installed, and a hand-written file lets
# tests use a predefined CJK CMap (text extraction needs no font file) and a fake /Encrypt.


@dataclass(frozen=True)
class PdfText:
    text: str
    x: float
    y: float  # PDF coordinates: from the bottom of the page
    size: float = 12.0


@dataclass(frozen=True)
class PdfPicture:
    jpeg: bytes
    px_width: int
    px_height: int
    x: float
    y: float
    width: float
    height: float


@dataclass
class _Writer:
    objects: list[bytes] = field(default_factory=list)

    def add(self, body: bytes) -> int:
        self.objects.append(body)
        return len(self.objects)

    def reserve(self) -> int:
        return self.add(b"")

    def set(self, number: int, body: bytes) -> None:
        self.objects[number - 1] = body


def _stream(dictionary: bytes, data: bytes) -> bytes:
    return b"<< " + dictionary + b" /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def _pdf_string(text: str) -> bytes:
    if all(ord(char) < 128 for char in text):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        return b"(" + escaped.encode("ascii") + b") Tj"
    return b"<" + text.encode("utf-16-be").hex().upper().encode() + b"> Tj"


def build_pdf(
    pages: list[list[PdfText | PdfPicture]],
    *,
    page_size: tuple[float, float] = (595.0, 842.0),
    encrypted: bool = False,
) -> bytes:
    writer = _Writer()
    catalog = writer.reserve()
    pages_obj = writer.reserve()
    latin = writer.add(
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
    )
    cid = writer.add(
        b"<< /Type /Font /Subtype /CIDFontType0 /BaseFont /STSong-Light "
        b"/CIDSystemInfo << /Registry (Adobe) /Ordering (GB1) /Supplement 4 >> /DW 1000 >>"
    )
    cjk = writer.add(
        b"<< /Type /Font /Subtype /Type0 /BaseFont /STSong-Light /Encoding /UniGB-UCS2-H "
        b"/DescendantFonts [%d 0 R] >>" % cid
    )
    kids = []
    for items in pages:
        content = b""
        xobjects = b""
        for index, item in enumerate(items):
            if isinstance(item, PdfText):
                font = b"/F1" if item.text.isascii() else b"/F2"
                content += b"BT %s %.1f Tf %.1f %.1f Td %s ET\n" % (
                    font,
                    item.size,
                    item.x,
                    item.y,
                    _pdf_string(item.text),
                )
            else:
                image = writer.add(
                    _stream(
                        b"/Type /XObject /Subtype /Image /Width %d /Height %d "
                        b"/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /DCTDecode"
                        % (item.px_width, item.px_height),
                        item.jpeg,
                    )
                )
                xobjects += b"/Im%d %d 0 R " % (index, image)
                content += b"q %.1f 0 0 %.1f %.1f %.1f cm /Im%d Do Q\n" % (
                    item.width,
                    item.height,
                    item.x,
                    item.y,
                    index,
                )
        stream = writer.add(_stream(b"", content))
        kids.append(
            writer.add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 %.1f %.1f] /Contents %d 0 R "
                b"/Resources << /Font << /F1 %d 0 R /F2 %d 0 R >> /XObject << %s>> >> >>"
                % (pages_obj, page_size[0], page_size[1], stream, latin, cjk, xobjects)
            )
        )
    writer.set(catalog, b"<< /Type /Catalog /Pages %d 0 R >>" % pages_obj)
    writer.set(
        pages_obj,
        b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (b" ".join(b"%d 0 R" % kid for kid in kids), len(kids)),
    )
    encrypt = None
    if encrypted:
        # Standard security handler with a user password: the /U check fails for the empty
        # password, exactly what a reader sees for a password-protected file.
        encrypt = writer.add(
            b"<< /Filter /Standard /V 1 /R 2 /Length 40 /P -44 "
            b"/O <" + b"AB" * 32 + b"> /U <" + b"CD" * 32 + b"> >>"
        )
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(writer.objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(offsets) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    file_id = b"<" + b"0123456789ABCDEF" * 2 + b">"
    trailer = b"/Size %d /Root %d 0 R /ID [%s %s]" % (len(offsets) + 1, catalog, file_id, file_id)
    if encrypt:
        trailer += b" /Encrypt %d 0 R" % encrypt
    out.write(b"trailer\n<< " + trailer + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


# --- Images -----------------------------------------------------------------------------------


def text_image(
    lines: list[str], *, size: tuple[int, int] = (900, 300), font_size: int = 48
) -> Image.Image:
    """White image with black text in Pillow's built-in font (no CJK font is installed)."""
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=font_size)
    y = 30
    for line in lines:
        draw.text((30, y), line, fill="black", font=font)
        y += int(font_size * 1.6)
    return image


def picture(size: tuple[int, int] = (200, 120), color: str = "steelblue") -> Image.Image:
    image = Image.new("RGB", size, color)
    margin = min(size) // 4
    ImageDraw.Draw(image).ellipse(
        (margin, margin, size[0] - margin, size[1] - margin), fill="orange"
    )
    return image


def encode(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


# --- ZIP bombs --------------------------------------------------------------------------------


def zip_bomb(member_names: list[str], *, bomb_name: str, bomb_bytes: int) -> bytes:
    """A ZIP that looks like an Office file (the named parts exist) plus one member of zeros that
    inflates to `bomb_bytes`; written in 1 MiB slices so the test never holds it in memory."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name in member_names:
            archive.writestr(name, "<xml/>")
        with archive.open(bomb_name, "w", force_zip64=True) as member:
            chunk = bytes(1024 * 1024)
            remaining = bomb_bytes
            while remaining > 0:
                member.write(chunk[: min(len(chunk), remaining)])
                remaining -= len(chunk)
    return buffer.getvalue()


def with_member(data: bytes, name: str, content: bytes | None) -> bytes:
    """The Office package `data` with member `name` replaced by `content` (None: removed)."""
    source = zipfile.ZipFile(io.BytesIO(data))
    assert name in source.namelist(), name
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            if info.filename != name:
                archive.writestr(info, source.read(info))
            elif content is not None:
                archive.writestr(info, content)
    return buffer.getvalue()
