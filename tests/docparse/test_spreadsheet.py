from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import openpyxl
import pytest

from docparse import parse_document
from docparse.types import Locator, ParseError

from .factories import with_member, zip_bomb

ROOT = Path(__file__).resolve().parents[3]


def xlsx(sheets: dict[str, list[list[object]]]) -> bytes:
    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for name, rows in sheets.items():
        sheet = workbook.create_sheet(name)
        for row in rows:
            sheet.append(row)
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def parse(data: bytes, limits, file_type: str = "xlsx", text_encoding: str | None = None):
    return parse_document(
        data,
        file_type=file_type,
        filename=f"t.{file_type}",
        limits=limits,
        text_encoding=text_encoding,
    )


def test_each_sheet_is_a_heading_and_a_gfm_table_with_row_locators(limits):
    # given
    data = xlsx(
        {
            "费用": [
                ["类别", "金额", "日期", "备注"],
                ["差旅", 1200.5, dt.datetime(2024, 3, 1), "含|税"],
                [None, None, None, None],
                ["餐费", 80, dt.datetime(2024, 3, 2, 12, 30), "多行\n说明"],
            ],
            "空表": [],
            "人员": [["姓名"], ["张三"]],
        }
    )

    # when
    result = parse(data, limits)

    # then
    assert [
        (block.kind, block.text if block.kind == "text" else "") for block in result.blocks
    ] == [
        ("text", "费用"),
        ("table", ""),
        ("text", "人员"),
        ("table", ""),
    ]
    assert result.blocks[0].heading_level == 1
    table = result.blocks[1]
    assert table.table_header == "| 类别 | 金额 | 日期 | 备注 |\n| --- | --- | --- | --- |"
    assert table.table_rows == (
        "| 差旅 | 1200.5 | 2024-03-01 | 含\\|税 |",
        "| 餐费 | 80 | 2024-03-02 12:30:00 | 多行 说明 |",
    )
    assert table.row_locators == (
        Locator(sheet="费用", cell_range="A2:D2"),
        Locator(sheet="费用", cell_range="A4:D4"),
    )
    assert table.locator == Locator(sheet="费用", cell_range="A1:D4")


def test_header_is_the_first_non_empty_row_and_widest_row_sets_width(limits):
    # given
    data = xlsx({"S": [[], [None, None], ["a", "b"], ["1", "2", "3"]]})

    # when
    table = parse(data, limits).blocks[1]

    # then
    assert table.table_header == "| a | b |  |\n| --- | --- | --- |"
    assert table.table_rows == ("| 1 | 2 | 3 |",)
    assert table.row_locators == (Locator(sheet="S", cell_range="A4:C4"),)


def test_rows_beyond_the_limit_are_refused(limits):
    # given
    data = xlsx({"S": [["h"], *[[i] for i in range(20)]]})

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, dataclasses.replace(limits, max_sheet_rows=10))

    # then
    assert caught.value.code == "too_many_rows"
    assert "S" in caught.value.message


def test_cells_beyond_the_limit_are_refused(limits):
    # given
    data = xlsx({"S": [[1, 2, 3, 4, 5]] * 10})

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, dataclasses.replace(limits, max_cells=20))

    # then
    assert caught.value.code == "too_many_cells"


def test_zip_bomb_disguised_as_xlsx_is_refused(limits):
    # given
    data = zip_bomb(
        ["[Content_Types].xml", "xl/workbook.xml"],
        bomb_name="xl/worksheets/sheet1.xml",
        bomb_bytes=8 * 2**20,
    )

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, dataclasses.replace(limits, max_archive_member_bytes=4 * 2**20))

    # then
    assert caught.value.code == "archive_too_large"


_SHEET_NS = b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'


@pytest.mark.parametrize(
    ("member", "content"),
    [
        # Sheets are streamed with ElementTree, whose ParseError is no lxml error.
        ("xl/worksheets/sheet1.xml", b"<worksheet><sheetData><row><c"),
        # A shared-string index past the end of the table: IndexError.
        (
            "xl/worksheets/sheet1.xml",
            _SHEET_NS + b'<sheetData><row r="1"><c r="A1" t="s"><v>99</v></c></row></sheetData>'
            b"</worksheet>",
        ),
        # No workbook part declared: openpyxl raises OSError.
        (
            "[Content_Types].xml",
            b'<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>',
        ),
    ],
)
def test_malformed_parts_are_refused_not_crashed_on(limits, member, content):
    # given
    data = with_member(xlsx({"S": [["a", "b"], [1, 2]]}), member, content)

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, limits)

    # then
    assert caught.value.code == "corrupt_file"
    assert "XLSX 文件已损坏" in caught.value.message


@pytest.mark.slow
def test_100k_rows_parse_with_bounded_memory(tmp_path):
    # given: written with openpyxl's streaming writer
    workbook = openpyxl.Workbook(write_only=True)
    sheet = workbook.create_sheet("数据")
    sheet.append(["编号", "部门", "金额"])
    for i in range(100_000):
        sheet.append([i, "研发部", i * 1.5])
    path = tmp_path / "big.xlsx"
    workbook.save(path)
    # Peak RSS of a fresh process measures everything (lxml/expat buffers too), which
    # tracemalloc would miss, and tracemalloc would make this parse ~5x slower.
    script = textwrap.dedent(
        f"""
        import json, resource, sys
        sys.path.insert(0, {str(ROOT)!r})
        from docparse import ParseLimits
        from docparse.spreadsheet import parse_xlsx
        data = open({str(path)!r}, "rb").read()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = parse_xlsx(data, limits=ParseLimits())
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        table = result.blocks[1]
        print(json.dumps({{"grew_kb": after - before, "rows": len(table.table_rows),
                           "last": table.row_locators[-1].cell_range}}))
        """
    )

    # when
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )

    # then
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["rows"] == 100_000
    assert report["last"] == "A100001:C100001"
    assert report["grew_kb"] < 200 * 1024


# --- CSV --------------------------------------------------------------------------------------


def test_csv_utf8_with_bom_and_quoted_newlines(limits):
    # given
    data = '\ufeff姓名,部门,说明\n张三,研发,"第一行\n第二行"\n\n李四,销售,a|b\n'.encode()

    # when
    table = parse(data, limits, "csv").blocks[0]

    # then
    assert table.table_header == "| 姓名 | 部门 | 说明 |\n| --- | --- | --- |"
    assert table.table_rows == ("| 张三 | 研发 | 第一行 第二行 |", "| 李四 | 销售 | a\\|b |")
    assert table.row_locators == (Locator(cell_range="A2:C2"), Locator(cell_range="A4:C4"))


def test_csv_gb18030_and_semicolon_delimiter(limits):
    # given
    data = "产品;价格;库存\n笔记本;5999;12\n显示器;1299;30\n".encode("gb18030")

    # when
    table = parse(data, limits, "csv", text_encoding=None).blocks[0]

    # then
    assert table.table_header.startswith("| 产品 | 价格 | 库存 |")
    assert table.table_rows == ("| 笔记本 | 5999 | 12 |", "| 显示器 | 1299 | 30 |")


def test_csv_row_limit(limits):
    # given
    data = ("h\n" + "x\n" * 50).encode()

    # when
    with pytest.raises(ParseError) as caught:
        parse(data, dataclasses.replace(limits, max_sheet_rows=10), "csv")

    # then
    assert caught.value.code == "too_many_rows"


def test_csv_with_only_blank_rows_has_no_text(limits):
    # when
    with pytest.raises(ParseError) as caught:
        parse(b",,\n,,\n", limits, "csv")

    # then
    assert caught.value.code == "no_text"


def test_csv_nul_characters_are_dropped(limits):
    # given: NULs past the sniffed head reach the parser; PostgreSQL refuses them in text
    data = b"a,b\n1,x\x00y\n"

    # when
    table = parse(data, limits, "csv", text_encoding="utf-8").blocks[0]

    # then
    assert table.table_rows == ("| 1 | xy |",)
