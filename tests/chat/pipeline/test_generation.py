"""Citation enforcement while the answer streams (AnswerFilter)."""

from __future__ import annotations

import pytest

from chat.pipeline.generation import AnswerFilter, filtered_stream, is_declined


def run(pieces, *, valid=(1, 2), assets=(5,), hosts=()):
    answer_filter = AnswerFilter(valid_numbers=set(valid), asset_ids=set(assets), link_hosts=hosts)
    text = "".join(filtered_stream(iter(pieces), answer_filter))
    return text, answer_filter


def one_char_at_a_time(text: str) -> list[str]:
    return list(text)


@pytest.mark.parametrize("split", [lambda t: [t], one_char_at_a_time])
def test_markers_for_context_sources_become_canonical(split):
    # given: the ways models write citations, streamed whole or one character at a time
    text, answer_filter = run(split("甲[来源 1](citation://1)乙[来源2]丙【来源 1】丁[2]。"))
    # then
    assert text == "甲[来源 1](citation://1)乙[来源 2](citation://2)丙[来源 1](citation://1)丁[来源 2](citation://2)。"
    assert answer_filter.cited_numbers == [1, 2, 1, 2]
    assert answer_filter.removed_citations == []


@pytest.mark.parametrize("split", [lambda t: [t], one_char_at_a_time])
def test_markers_outside_the_context_are_removed_and_counted(split):
    text, answer_filter = run(split("甲[来源 9](citation://9)乙[来源 3]丙[7]。"))
    assert text == "甲乙丙。"
    assert answer_filter.removed_citations == [9, 3, 7]


def test_years_and_indexes_in_brackets_are_left_alone():
    text, answer_filter = run(["成立于[2024]年，a[0] 是首项，[注] 见下。"])
    assert text == "成立于[2024]年，a[0] 是首项，[注] 见下。"
    assert answer_filter.removed_citations == []


@pytest.mark.parametrize("split", [lambda t: [t], one_char_at_a_time])
def test_only_whitelisted_asset_images_survive(split):
    # given: a whitelisted asset, an unknown asset, an external image and a data URL
    text, answer_filter = run(
        split("图：![前面板](asset://5)![x](asset://6)![y](https://evil.example/a.png)![z](data:image/png;base64,AAAA)完")
    )
    # then: no reference that a client could fetch except the whitelisted one
    assert text == "图：![前面板](asset://5)完"
    assert answer_filter.blocked_images == 3


@pytest.mark.parametrize("split", [lambda t: [t], one_char_at_a_time])
def test_a_link_is_shown_as_text_with_its_address(split):
    # when: no host is allowed (the default)
    text, answer_filter = run(split("见 [说明](https://example.com) 与感叹号！结束"))
    # then: the label and the whole address as text, the address in a code span
    assert text == "见 [说明] (`https://example.com`) 与感叹号！结束"
    assert answer_filter.shown_links == 1


@pytest.mark.parametrize("split", [lambda t: [t], one_char_at_a_time])
def test_a_link_to_an_allowed_host_stays_a_link(split):
    # when
    text, answer_filter = run(split("见 [说明](https://example.com/a \"标题\") 或 https://example.com/b。"),
                              hosts=("example.com",))
    # then: both links, written so every renderer agrees where they point
    assert text == "见 [说明](<https://example.com/a>) 或 [https://example.com/b](<https://example.com/b>)。"
    assert answer_filter.kept_links == 2 and answer_filter.shown_links == 0


def test_an_address_after_a_backtick_or_a_backslash_is_still_fenced():
    text, _ = run(["a`http://e.example/x` \\http://e.example/y"])
    # the text's own backtick makes our fence longer; a backslash cannot escape it
    assert text == "a` ``http://e.example/x`` ` \\ ``http://e.example/y``"


def test_unfinished_markup_at_the_end_is_released_as_text():
    text, _ = run(["结尾 [来源", " 1"])
    assert text == "结尾 [来源 1"


def test_a_long_run_after_a_bracket_is_not_held_forever():
    long = "[" + "来" * 10 + "字" * 500
    text, _ = run([long])
    assert text == long


def test_declined_answers_are_recognised():
    assert is_declined("根据当前知识库无法确定该问题的答案：……")
    assert not is_declined("年假 7 天。")
    # a model's own words for it, citing nothing
    assert is_declined("抱歉，资料中没有提到星河X3 Pro 是否支持 5G 手机卡。")
    assert is_declined("提供的资料未提及该信息，建议联系管理员。")
    # an answer that cites a source says something, whatever follows
    assert not is_declined("资料中没有提到 5G，但星河X3 Pro 支持 Wi-Fi 6E。", cited=True)
    assert not is_declined("年假 7 天，没有提到折算。")
