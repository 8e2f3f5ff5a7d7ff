from __future__ import annotations

import pytest

from docparse import parse_document
from docparse.types import ParseError


def parse(html: str, limits):
    return parse_document(
        html.encode("utf-8"),
        file_type="html",
        filename="a.html",
        limits=limits,
        text_encoding="utf-8",
    )


def test_headings_blocks_and_tables_without_scripts(limits):
    # given
    html = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html><head><title>报销制度</title><script>var leaked = "SCRIPT";</script>
<style>p { color: red }</style><link rel="stylesheet" href="http://example.com/x.css"></head>
<body>
<h1>报销制度</h1>
<p>第一段
文字。<b>加粗</b> and <i>English</i> words.</p>
<noscript>NOSCRIPT</noscript><template><p>TEMPLATE</p></template>
<ul><li>项目一</li><li>项目二<br>换行</li></ul>
<img src="http://example.com/x.png" alt="流程图">
<table>
  <thead><tr><th>类别</th><th>上限</th></tr></thead>
  <tbody><tr><td>住宿</td><td>500|元</td></tr><tr><td colspan="2">合计</td></tr></tbody>
</table>
<h2>附则</h2><div>外层<div>内层</div></div>
</body></html>"""

    # when
    result = parse(html, limits)

    # then
    texts = [(block.kind, block.heading_level, block.text) for block in result.blocks]
    assert texts == [
        ("text", 1, "报销制度"),
        ("text", 0, "第一段文字。加粗 and English words."),
        ("text", 0, "项目一"),
        ("text", 0, "项目二\n换行"),
        ("text", 0, "流程图"),
        ("table", 0, "| 类别 | 上限 |\n| --- | --- |\n| 住宿 | 500\\|元 |\n| 合计 | 合计 |"),
        ("text", 2, "附则"),
        ("text", 0, "外层"),
        ("text", 0, "内层"),
    ]
    assert result.title == "报销制度"
    assert result.blocks[0].locator.line == 6
    joined = " ".join(block.text for block in result.blocks)
    assert "SCRIPT" not in joined and "NOSCRIPT" not in joined and "TEMPLATE" not in joined


def test_table_without_th_uses_first_row_as_header(limits):
    # when
    result = parse(
        "<table><tr><td>a</td><td>b</td></tr><tr><td>1</td><td>2</td></tr></table>", limits
    )

    # then
    assert result.blocks[0].table_header == "| a | b |\n| --- | --- |"
    assert result.blocks[0].table_rows == ("| 1 | 2 |",)


def test_pre_keeps_line_breaks(limits):
    # when
    result = parse("<pre>line one\n  line two</pre>", limits)

    # then
    assert result.blocks[0].text == "line one\nline two"


@pytest.mark.parametrize(("colspan", "width"), [("²", 1), ("abc", 1), (" 3 ", 3), ("999", 50)])
def test_colspan_values_int_cannot_read_count_as_one(limits, colspan, width):
    # when
    result = parse(
        f"<table><tr><td colspan='{colspan}'>a</td></tr><tr><td>b</td></tr></table>", limits
    )

    # then
    assert result.blocks[0].table_header.count("---") == width


@pytest.mark.parametrize(
    "html",
    [
        # libxml2 stops at 255 levels and silently drops everything after that point.
        "<p>前言</p>" + "<div>" * 300 + "深处" + "</div>" * 300 + "<p>结尾</p>",
        # ... and at a 10 MB text node.
        "<p>前言</p><p>" + "字" * 10_000_001 + "</p>",
    ],
)
def test_a_page_beyond_the_parsers_limits_is_refused_not_cut_short(limits, html):
    # when
    with pytest.raises(ParseError) as caught:
        parse(html, limits)

    # then
    assert caught.value.code == "html_too_complex"


def test_nul_characters_are_dropped(limits):
    # when
    result = parse("<p>a\x00b</p>", limits)

    # then
    assert result.blocks[0].text == "ab"
