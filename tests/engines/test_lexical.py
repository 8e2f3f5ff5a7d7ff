"""Provider-independent lexical measures (engines.lexical)."""

from __future__ import annotations

import pytest

from engines.lexical import (
    codes_and_numbers,
    content_terms,
    coverage,
    model_code_spans,
    model_codes,
    normalise,
    similarity,
    states_quantity,
    term_weight,
)


def test_normalise_ignores_width_case_spaces_and_punctuation():
    assert normalise("年假 有多少天？") == normalise("年假有多少天?") == "年假有多少天"
    assert normalise("ＶＰＮ 密码") == "vpn密码"


def test_content_terms_drop_question_words_and_keep_unknown_compounds_whole():
    # jieba splits "年假" into 年 / 假 here; consecutive single characters are merged back
    assert content_terms("年假有几天？") == ["年假"]
    assert "多少" not in content_terms("出差住宿标准是多少？")
    assert content_terms("星河X3 Pro 的保修期是多久？") == ["星河", "x3", "pro", "保修期"]


def test_specific_terms_weigh_more_than_common_ones():
    assert term_weight("保修期") > term_weight("今天")
    assert term_weight("未登录词ABC") > 0


def test_coverage_is_the_weighted_share_of_question_terms_found():
    terms = content_terms("今天北京天气怎么样？")
    result = coverage(terms, "北京办公室位于朝阳区。今天下午开会。")
    assert 0 < result.score < 1
    assert set(result.matched) == {"今天", "北京"}
    assert result.key_term == "天气"
    assert result.key_term_found is False
    assert coverage(terms, "今天北京天气晴。").score == pytest.approx(1.0)


def test_coverage_matches_across_segmentation_differences():
    assert coverage(content_terms("入职流程"), "新员工入职的流程如下").score == pytest.approx(1.0)


def test_similarity_is_symmetric_and_one_for_equal_questions():
    assert similarity("年假有多少天？", "年假 有多少天") == 1.0
    a, b = "年假能休几天？", "年假有多少天？"
    assert similarity(a, b) == pytest.approx(similarity(b, a))
    assert similarity("报销需要哪些材料？", "VPN 怎么连接？") == 0.0


def test_question_phrases_and_glued_particles_are_not_content():
    # "哪一年" asks for a year; "马赛罗是" is jieba gluing 是 to a name it does not know
    assert "哪一年" not in content_terms("海宁西站哪一年启用？")
    assert "罗是" not in content_terms("马赛罗是什么时候退役的？")
    assert "哪些地方" not in content_terms("亚麻在中国主要在哪些地方栽培？")


def test_words_jieba_glues_to_an_adverb_or_position_word_are_not_one_unknown_word():
    # "单最", "晚要", "天内交", "假能", "后钱", "内休" are none of them words: as unknown (so the
    # rarest, the key) terms they are found in no document and decline the question
    assert content_terms("报销单最晚要在多少天内交？") == ["报销", "单", "最", "晚", "内", "交"]
    assert content_terms("年假能攒到明年用吗") == ["年假", "攒", "明年", "用"]
    assert "后钱" not in content_terms("报销审核通过后钱多久能到账？")
    assert "内休" not in content_terms("婚假要在领证后多久内休完？")
    assert content_terms("星河X3 最多能连多少台设备？")[:3] == ["星河", "x3", "最多"]
    # "啥意思" asks what something means, as "什么意思" does
    assert "啥意思" not in content_terms("路由器灯一直闪蓝色是啥意思")
    # while names jieba does not know stay whole
    assert content_terms("苏镜宇的父亲是谁") == ["苏镜宇", "父亲"]
    assert "内马尔" in content_terms("内马尔效力于哪家俱乐部？")


def test_lines_a_page_broke_are_joined_and_items_kept_apart():
    from engines.lexical import unwrap_lines

    lines = [
        "星河 X 系列共四款型号：入门款星河X1、主流款星河X3、高性能款星河X3",
        "Pro 和全屋覆盖的星河X5 Mesh 套装。",
        "为消除办公区域安全隐患，行政部将于2024年11月18日至11月22",
        "日对杭州总部A座3至12层开展年度安全检查。检查内容如下：",
        "一、灭火器是否在有效期内，压力指针是否处于绿色区域并且外观完好无损无锈蚀",
        "二、安全出口和消防通道是否畅通；",
        "| 型号 | 价格 |",
    ]
    assert unwrap_lines(lines) == [
        "星河 X 系列共四款型号：入门款星河X1、主流款星河X3、高性能款星河X3 Pro 和全屋覆盖的星河X5 Mesh 套装。",
        "为消除办公区域安全隐患，行政部将于2024年11月18日至11月22日对杭州总部A座3至12层开展年度安全检查。检查内容如下：",
        "一、灭火器是否在有效期内，压力指针是否处于绿色区域并且外观完好无损无锈蚀",
        "二、安全出口和消防通道是否畅通；",
        "| 型号 | 价格 |",
    ]


def test_sentence_spans_keep_closing_quotes_and_do_not_cut_inside_codes_or_images():
    from engines.lexical import sentence_spans

    text = "他说：“好的！”然后离开。版本 v1.2 已发布\n![图](asset://3) 见上。"
    pieces = [text[a:b] for a, b in sentence_spans(text)]
    assert pieces == ["他说：“好的！”", "然后离开。", "版本 v1.2 已发布", "![图](asset://3) 见上。"]


def test_question_words_are_shared_and_exceptions_are_content():
    from engines.lexical import is_question_word

    assert all(is_question_word(w) for w in ("几个月", "多大", "是谁", "哪一年", "第几"))
    assert not is_question_word("几乎") and not is_question_word("年假")


def test_traditional_characters_fold_to_simplified_like_the_index():
    # given a question typed in traditional characters
    question = "婚假有幾天？"
    # when its terms are taken and matched
    terms = content_terms(question)
    # then they are the simplified question's, and the simplified evidence covers them
    assert terms == content_terms("婚假有几天？")
    assert normalise("報銷審核") == normalise("报销审核")
    assert coverage(content_terms("域賬號密碼"), "域账号密码至少 12 位").score == pytest.approx(1.0)


def test_what_a_question_counts_or_asks_the_kind_of_is_not_its_subject():
    # "几个字符" asks for a count in characters; the answer may say "12 位"
    assert content_terms("电脑登录密码至少得设几个字符？") == ["电脑", "登录", "密码", "至少", "设"]
    # "什么地方" asks where; "地方政府" is a subject
    assert "地方" not in content_terms("路由器的序列号印在什么地方？")
    assert "地方" in content_terms("地方政府是什么？")


def test_a_pronoun_or_modal_glued_to_the_next_character_is_dropped():
    # jieba's HMM reads "我入职" as 我入 / 职 and "能休" as one word
    assert content_terms("我入职三年了，一年能休几天年假？") == ["入职", "三年", "一年", "休", "年假"]
    # a name jieba knows as a word keeps its first character
    assert content_terms("何晏是谁？") == ["何晏"]


@pytest.mark.parametrize(
    ("text", "codes"),
    [
        ("星河X3 Pro 的保修期是多久？", {"x3pro"}),
        ("星河ｘ３　ｐｒｏ和 X5", {"x3pro", "x5"}),  # full width folds like the index
        ("星河X3和X3 Pro有什么区别", {"x3", "x3pro"}),
        ("RTX4090 与 AX3000 路由器", {"rtx4090", "ax3000"}),
        ("年假有几天？", set()),
    ],
)
def test_model_codes_tell_a_model_from_its_pro_version(text, codes):
    assert model_codes(text) == codes


def test_model_code_spans_keep_the_written_form_in_order():
    assert model_code_spans("先问星河X3 Pro，再问 X5") == ["X3 Pro", "X5"]


@pytest.mark.parametrize(
    ("text", "states"),
    [("整机保修 3 年", True), ("保修三年", True), ("星河X3 的整机保修", False), ("密码至少十二位", True), ("见下表", False)],
)
def test_a_quantity_is_a_figure_or_a_numeral_with_its_unit_never_a_model_name(text, states):
    assert states_quantity(text) is states


def test_codes_and_numbers_separate_questions_that_differ_only_in_them():
    assert codes_and_numbers("满 3 年有几天年假") != codes_and_numbers("满 10 年有几天年假")
    assert codes_and_numbers("VPN 怎么连") == codes_and_numbers("vpn怎么连？")


def test_an_item_number_starts_its_sentence_and_is_not_one():
    from engines.lexical import sentence_spans

    text = "1. 打开 https://x.example.com\n2) 输入工号。再试一次. 好\n共 3. 个"
    assert [text[a:b] for a, b in sentence_spans(text)] == [
        "1. 打开 https://x.example.com", "2) 输入工号。", "再试一次.", "好", "共 3.", "个",
    ]
