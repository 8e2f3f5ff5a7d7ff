"""The sparse channel's terms: codes, units, English, traditional characters, domain terms."""

from __future__ import annotations

import pytest

from engines.analysis import Dictionary, analyse, normalise, parse_terms


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a code whole, its parts, its joined form: "LX9000", "lx 9000", "LX-9000" all meet
        ("LX-9000", ["lx-9000", "lx", "9000", "lx9000"]),
        ("PPR-9087", ["ppr-9087", "ppr", "9087", "ppr9087"]),
        ("X3 Pro", ["x3", "pro"]),
        # a number with its unit is one more term; a decimal stays one number
        ("3.5吨", ["3.5", "3.5吨", "吨"]),
        ("2℃", ["2", "2°c", "c"]),
        ("增长15%", ["增长", "15", "15%"]),
        # traditional characters are searched as simplified ones
        ("員工報銷", ["员工", "报销"]),
        # full-width letters and digits are ordinary ones
        ("ＬＸ－９０００", ["lx-9000", "lx", "9000", "lx9000"]),
    ],
)
def test_terms(text, expected):
    assert analyse(text) == expected


def test_a_code_inside_chinese_is_cut_out_of_it():
    # when
    terms = analyse("星河X3的退货说明")

    # then: no "3的" unit term, the code is its own term
    assert "x3" in terms
    assert "3的" not in terms
    assert "退货" in terms


def test_english_words_are_lowercased_words():
    assert analyse("Employees Running REPORTS") == ["employees", "running", "reports"]


def test_a_dictionary_term_is_added_whole_to_the_normal_segmentation():
    # given
    dictionary = Dictionary(["星河云盘", "X3 Pro"])

    # when
    terms = analyse("星河云盘和星河X3 Pro", dictionary=dictionary)

    # then: whole terms first, the usual words still there (an old index still matches)
    assert terms[:2] == ["星河云盘", "x3_pro"]
    assert {"星河", "云盘", "x3", "pro"} <= set(terms)


def test_longer_dictionary_terms_win_over_their_prefixes():
    assert Dictionary(["星河", "星河云盘"]).find(normalise("星河云盘")) == ["星河云盘"]


def test_overlong_tokens_are_not_terms():
    assert analyse("a" * 80 + " 正文") == ["正文"]


def test_dictionary_text_is_one_term_per_line_with_comments():
    # when
    terms = parse_terms("星河云盘\n# 产品线\nLX-9000, PPR-9087、X3 Pro\n\n星河云盘\n")

    # then
    assert terms == ("星河云盘", "LX-9000", "PPR-9087", "X3 Pro")


def test_a_how_heavy_question_also_searches_the_measure_it_asks_for():
    from engines.analysis import analysed_query, analysed_text

    assert analysed_query("星河X3 Pro 有多重？").split()[-1] == "重量"
    # the index side is untouched: documents are stored under their own words only
    assert "重量" not in analysed_text("星河X3 Pro 有多重？").split()
