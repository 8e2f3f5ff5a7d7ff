from __future__ import annotations

import pytest

from docparse import parse_document
from docparse.types import ParseError


def parse(data: bytes, limits, encoding: str | None = None):
    return parse_document(
        data, file_type="txt", filename="a.txt", limits=limits, text_encoding=encoding
    )


def test_paragraphs_and_numbered_headings_with_lines(limits):
    # given
    text = "\n".join(
        [
            "第一章 总则",  # 1
            "本制度适用于全体员工。",  # 2
            "自发布之日起施行。",  # 3
            "",  # 4
            "一、适用范围",  # 5
            "",  # 6
            "全体员工。",  # 7
            "",  # 8
            "1. 单独成行的编号标题",  # 9
            "",  # 10
            "1. 列表第一项",  # 11
            "2. 列表第二项",  # 12
            "二、报销流程",  # 13
            "三、审批流程",  # 14
        ]
    )

    # when
    result = parse(text.encode("utf-8"), limits, "utf-8")

    # then
    summary = [(block.text, block.heading_level, block.locator.line) for block in result.blocks]
    assert summary == [
        ("第一章 总则", 1, 1),
        ("本制度适用于全体员工。\n自发布之日起施行。", 0, 2),
        ("一、适用范围", 2, 5),
        ("全体员工。", 0, 7),
        ("1. 单独成行的编号标题", 3, 9),
        # Adjacent lines numbered alike are a list, not headings.
        ("1. 列表第一项\n2. 列表第二项\n二、报销流程\n三、审批流程", 0, 11),
    ]


@pytest.mark.parametrize("encoding", ["gb18030", "utf-8-sig"])
def test_encoding_detection(limits, encoding):
    # when
    result = parse("中文内容，编码测试。".encode(encoding), limits)

    # then
    assert result.blocks[0].text == "中文内容，编码测试。"


def test_hint_wins_over_detection(limits):
    # given: GBK bytes that also happen to be valid in no UTF-8 sense
    data = "简体".encode("gbk")

    # when
    result = parse(data, limits, "gbk")

    # then
    assert result.blocks[0].text == "简体"


def test_undecodable_bytes_are_refused(limits):
    # when
    with pytest.raises(ParseError) as caught:
        parse(b"\xff\xfe\xfd\x81\x30\xff", limits)

    # then
    assert caught.value.code == "text_decode_failed"


def test_blank_text_is_refused(limits):
    # when
    with pytest.raises(ParseError) as caught:
        parse(b"  \n\n\t\n", limits)

    # then
    assert caught.value.code == "no_text"
