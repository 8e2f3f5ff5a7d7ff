from __future__ import annotations

from docparse import parse_document
from docparse.types import Locator


def parse(text: str, limits):
    return parse_document(
        text.encode("utf-8"), file_type="md", filename="a.md", limits=limits, text_encoding="utf-8"
    )


def test_headings_paragraphs_tables_and_code_with_line_locators(limits):
    # given
    source = "\n".join(
        [
            "---",  # 1
            "title: front matter is skipped",  # 2
            "---",  # 3
            "# 员工手册",  # 4
            "",  # 5
            "欢迎加入。本手册说明制度。",  # 6
            "第二行 ![流程图](http://example.com/x.png) 结束。",  # 7
            "",  # 8
            "报销",  # 9
            "----",  # 10
            "",  # 11
            "| 项目 | 金额 |",  # 12
            "|:---|---:|",  # 13
            "| 差旅 | 100 \\| 200 |",  # 14
            "| 餐费 | 50 |",  # 15
            "",  # 16
            "```python",  # 17
            "# not a heading",  # 18
            "",  # 19
            "x = 1",  # 20
            "```",  # 21
            "### 附则 ###",  # 22
            "- 第一条",  # 23
            "- 第二条",  # 24
        ]
    )

    # when
    result = parse(source, limits)

    # then
    summary = [(block.kind, block.heading_level, block.locator.line) for block in result.blocks]
    assert summary == [
        ("text", 1, 4),
        ("text", 0, 6),
        ("text", 2, 9),
        ("table", 0, 12),
        ("text", 0, 17),
        ("text", 3, 22),
        ("text", 0, 23),
    ]
    assert result.title == "员工手册"
    assert result.blocks[1].text == "欢迎加入。本手册说明制度。\n第二行 流程图 结束。"
    table = result.blocks[3]
    assert table.table_header == "| 项目 | 金额 |\n| --- | --- |"
    assert table.table_rows == ("| 差旅 | 100 \\| 200 |", "| 餐费 | 50 |")
    assert table.row_locators == (Locator(line=14), Locator(line=15))
    assert result.blocks[4].text == "```python\n# not a heading\n\nx = 1\n```"
    assert result.blocks[5].text == "附则"


def test_images_are_never_fetched_only_alt_text_kept(limits):
    # when
    result = parse(
        '看图 ![架构](https://evil.example/a.png) 和 <img src="http://evil/b.png" alt="部署">',
        limits,
    )

    # then
    assert result.blocks[0].text == "看图 架构 和 部署"
    assert result.images == []


def test_gb18030_markdown_without_hint(limits):
    # when
    result = parse_document(
        "# 标题\n\n中文内容。".encode("gb18030"), file_type="md", filename="a.md", limits=limits
    )

    # then
    assert [block.text for block in result.blocks] == ["标题", "中文内容。"]
