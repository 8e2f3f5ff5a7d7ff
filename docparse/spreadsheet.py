"""XLSX (openpyxl, streaming) and CSV: each sheet becomes one GFM table with per-row locators.

Rows are streamed and turned into GFM strings as they are read, so memory grows with the text
of the table, never with openpyxl's cell objects; row and cell limits stop hostile files early.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import openpyxl
from openpyxl.utils import get_column_letter
from openpyxl.utils.exceptions import InvalidFileException

from ._common import (
    check_archive,
    decode_text,
    gfm_cell,
    gfm_header,
    gfm_row,
    reading_office_file,
)
from .limits import ParseLimits
from .types import Block, Locator, ParseError, ParseResult

CSV_SNIFF_CHARS = 64 * 1024
CSV_DELIMITERS = ",;\t|"


@dataclass
class _CellBudget:
    limit: int
    used: int = 0

    def spend(self, cells: int) -> None:
        self.used += cells
        if self.used > self.limit:
            raise ParseError(
                "too_many_cells",
                f"表格单元格超过 {self.limit:,} 个的上限，请删除无关区域或拆分文件后上传。",
            )


@dataclass
class _TableBuilder:
    """Accumulates one sheet: the first non-empty row is the header, the rest are data rows."""

    sheet: str | None
    max_rows: int
    header: list[str] | None = None
    header_row: int = 0
    width: int = 0
    rows: list[str] = field(default_factory=list)
    locators: list[Locator] = field(default_factory=list)
    last_row: int = 0

    def add(self, row_number: int, values: Sequence[object]) -> None:
        cells = [_format_value(value) for value in values]
        while cells and not cells[-1]:
            cells.pop()
        if not cells:
            return
        self.width = max(self.width, len(cells))
        self.last_row = row_number
        if self.header is None:
            self.header, self.header_row = cells, row_number
            return
        if len(self.rows) >= self.max_rows:
            where = f"工作表「{self.sheet}」" if self.sheet else "CSV 文件"
            raise ParseError(
                "too_many_rows",
                f"{where}超过 {self.max_rows:,} 行数据的上限，请拆分文件后上传。",
            )
        self.rows.append(gfm_row(cells))
        self.locators.append(
            Locator(
                sheet=self.sheet,
                cell_range=f"A{row_number}:{get_column_letter(len(cells))}{row_number}",
            )
        )

    def blocks(self) -> list[Block]:
        if self.header is None:
            return []
        # Rows keep their own cell count; GFM pads short rows, and the header spans the widest.
        header = gfm_header(self.header, self.width)
        cell_range = f"A{self.header_row}:{get_column_letter(self.width)}{self.last_row}"
        table = Block(
            kind="table",
            text="\n".join((header, *self.rows)),
            locator=Locator(sheet=self.sheet, cell_range=cell_range),
            table_header=header,
            table_rows=tuple(self.rows),
            row_locators=tuple(self.locators),
        )
        if self.sheet is None:
            return [table]
        return [
            Block(kind="text", text=self.sheet, heading_level=1, locator=Locator(sheet=self.sheet)),
            table,
        ]


def _format_value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return format(value, ".15g")
    if isinstance(value, dt.datetime):
        if value.time() == dt.time(0):
            return value.date().isoformat()
        return value.isoformat(sep=" ", timespec="seconds")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return gfm_cell(value)


# --- XLSX -------------------------------------------------------------------------------------


def parse_xlsx(data: bytes, *, limits: ParseLimits) -> ParseResult:
    check_archive(data, limits=limits, kind="XLSX")
    budget = _CellBudget(limits.max_cells)
    blocks: list[Block] = []
    with reading_office_file("XLSX", InvalidFileException):
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            for sheet in workbook.worksheets:
                builder = _TableBuilder(sheet=sheet.title, max_rows=limits.max_sheet_rows)
                # The stored dimension is often wrong (some writers always say "A1"); scan all.
                sheet.reset_dimensions()
                _fill(builder, sheet.iter_rows(values_only=True), budget)
                blocks.extend(builder.blocks())
        finally:
            workbook.close()
    return ParseResult(blocks=blocks)


def _fill(builder: _TableBuilder, rows: Iterable[Sequence[object]], budget: _CellBudget) -> None:
    for row_number, values in enumerate(rows, start=1):
        budget.spend(len(values))
        builder.add(row_number, values)


# --- CSV --------------------------------------------------------------------------------------


def parse_csv(data: bytes, *, limits: ParseLimits, text_encoding: str | None) -> ParseResult:
    text = decode_text(data, hint=text_encoding)
    dialect = _sniff_dialect(text[:CSV_SNIFF_CHARS])
    builder = _TableBuilder(sheet=None, max_rows=limits.max_sheet_rows)
    try:
        _fill(
            builder,
            csv.reader(io.StringIO(text, newline=""), dialect),
            _CellBudget(limits.max_cells),
        )
    except csv.Error as exc:
        raise ParseError(
            "csv_invalid", f"CSV 格式错误，无法解析（{exc}）。请检查引号与分隔符后重新上传。"
        ) from exc
    return ParseResult(blocks=builder.blocks())


def _sniff_dialect(sample: str) -> type[csv.Dialect] | csv.Dialect:
    # The sample may end mid-record; drop the partial last line so the sniffer sees whole rows.
    if "\n" in sample:
        sample = sample[: sample.rfind("\n")]
    try:
        return csv.Sniffer().sniff(sample, delimiters=CSV_DELIMITERS)
    except csv.Error:
        return csv.excel
