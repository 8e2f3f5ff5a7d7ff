"""The common structure every parser returns, whatever the format.

A parser turns bytes into an ordered list of `Block`s plus the images it found. The chunker reads
only this structure, so adding a format never touches chunking, embedding or indexing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

BlockKind = Literal["text", "table", "image"]


@dataclass(frozen=True)
class Locator:
    """Where a block sits in its source, for citations and previews.

    PDF: `page` (1-based). XLSX/CSV: `sheet` and `cell_range` like "A1:F20". PPTX: `slide`
    (1-based). Text formats: `line` (1-based first line) when known.
    """

    page: int | None = None
    sheet: str | None = None
    cell_range: str | None = None
    slide: int | None = None
    line: int | None = None

    def as_dict(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if value is not None}


@dataclass(frozen=True)
class BBox:
    """A rectangle on a PDF page in PDF points, origin top-left: (x0, y0) upper-left corner."""

    page: int
    x0: float
    y0: float
    x1: float
    y1: float

    def as_list(self) -> list[float]:
        return [self.page, round(self.x0, 2), round(self.y0, 2), round(self.x1, 2), round(self.y1, 2)]


@dataclass(frozen=True)
class ParsedImage:
    """An image found in the document, already re-encoded as JPEG bytes."""

    key: str  # unique within the parse result; blocks refer to images by this key
    jpeg: bytes
    width: int
    height: int
    page: int | None = None
    bbox: BBox | None = None
    nearby_text: str = ""
    ocr_text: str = ""


@dataclass(frozen=True)
class Block:
    kind: BlockKind
    text: str
    # 1..6 for headings, 0 for body blocks. A heading block starts a new section.
    heading_level: int = 0
    locator: Locator = field(default_factory=Locator)
    bboxes: tuple[BBox, ...] = ()
    # For tables: the header row in GFM (e.g. "| a | b |\n| --- | --- |") and the data rows in
    # GFM, one string per row, so the chunker can split between rows and repeat the header.
    table_header: str = ""
    table_rows: tuple[str, ...] = ()
    # For images: keys of `ParsedImage`s this block stands for.
    image_keys: tuple[str, ...] = ()
    # Per-row locators of a table (same length as table_rows) so a table chunk can report the
    # exact sheet range it covers; empty when not applicable.
    row_locators: tuple[Locator, ...] = ()


@dataclass(frozen=True)
class ParseResult:
    blocks: list[Block]
    images: list[ParsedImage] = field(default_factory=list)
    page_count: int | None = None
    title: str | None = None
    warnings: list[str] = field(default_factory=list)
    ocr_pages: list[int] = field(default_factory=list)
    # Pages left unread because OCR ran out of time (not because they hold no text): another
    # run on a quieter machine may read them.
    ocr_timed_out_pages: list[int] = field(default_factory=list)


class ParseError(Exception):
    """A document that cannot be parsed; `code` is stable, the message is shown to staff.

    `transient`: the file may be fine and the machine was not (OCR ran out of time on a busy
    machine): worth another try later, unlike a file that is broken or empty."""

    def __init__(self, code: str, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.transient = transient

    def __reduce__(self):
        # Parsing runs in a child process: the error must come back with its code.
        return (_parse_error, (self.code, self.message, self.transient))


def _parse_error(code: str, message: str, transient: bool) -> ParseError:
    return ParseError(code, message, transient=transient)
