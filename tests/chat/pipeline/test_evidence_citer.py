"""Citations an answerer omitted, attached sentence by sentence from the evidence."""

from __future__ import annotations

import pytest

from chat.pipeline.citations import EvidenceCiter
from chat.pipeline.generation import filtered_stream

SOURCES = {
    1: "员工差旅住宿标准：深圳每晚不超过700元，成都每晚不超过500元。",
    2: "年假：累计工作满1年不满10年的，年休假5天；满10年不满20年的，年休假10天。",
}


def through(pieces: list[str], *, sources=SOURCES, min_support: float = 0.5) -> tuple[str, list[int]]:
    citer = EvidenceCiter(sources, min_support=min_support)
    return "".join(filtered_stream(iter(pieces), citer)), citer.attached


def by_char(text: str) -> list[str]:
    return list(text)


@pytest.mark.parametrize("split", [lambda text: [text], by_char], ids=["whole", "char_by_char"])
def test_each_uncited_sentence_gets_the_source_it_rests_on(split):
    # given: a model's answer that cites nothing
    answer = "在深圳出差，住宿每晚最多可报700元。工作满1年不满10年的员工，年休假5天。"
    # when
    text, attached = through(split(answer))
    # then: each sentence cites its own source, before its end; nothing else changed
    assert text == ("在深圳出差，住宿每晚最多可报700元[来源 1](citation://1)。"
                    "工作满1年不满10年的员工，年休假5天[来源 2](citation://2)。")
    assert attached == [1, 2]


@pytest.mark.parametrize("split", [lambda text: [text], by_char], ids=["whole", "char_by_char"])
def test_a_sentence_the_answerer_cited_is_left_as_it_is(split):
    # given: one sentence cited after its end, one before, one not at all
    answer = ("深圳每晚不超过700元。[来源 1](citation://1)\n"
              "年休假5天[来源 2](citation://2)。成都每晚不超过500元。")
    # when
    text, attached = through(split(answer))
    # then: only the uncited one gets a marker
    assert text == ("深圳每晚不超过700元。[来源 1](citation://1)\n"
                    "年休假5天[来源 2](citation://2)。成都每晚不超过500元[来源 1](citation://1)。")
    assert attached == [1]


def test_declines_tables_and_sentences_resting_on_nothing_get_no_marker():
    # given
    answer = ("根据当前知识库无法确定年假能否顺延。\n"
              "| 城市 | 标准 |\n| 深圳 | 700元 |\n"
              "如有疑问请联系人事部门处理。\n"
              "```\n深圳每晚不超过700元\n```\n"
              "深圳每晚不超过700元")
    # when
    text, attached = through(by_char(answer))
    # then: only the last sentence (no end: the answer's end is its end) is cited
    assert text == answer + "[来源 1](citation://1)"
    assert attached == [1]


def test_a_broken_stream_keeps_what_was_held_and_attaches_nothing_more():
    # given: the model's stream breaks right after a sentence's end
    def pieces():
        yield "深圳每晚不超过700元。"
        raise ConnectionError("the model went away")

    citer = EvidenceCiter(SOURCES, min_support=0.5)
    delivered: list[str] = []
    # when
    with pytest.raises(ConnectionError):
        for piece in filtered_stream(pieces(), citer):
            delivered.append(piece)
    # then: the held end was delivered, as written
    assert "".join(delivered) == "深圳每晚不超过700元。"
    assert citer.attached == []


def test_the_threshold_decides():
    # given: a sentence sharing some words with the source
    answer = "深圳的住宿标准需要咨询行政部门确认。"
    # then
    assert through([answer], min_support=0.3)[1] == [1]
    assert through([answer], min_support=0.9)[1] == []


def test_behind_the_answer_filter_a_marker_the_model_wrote_loosely_still_counts_as_its_own():
    # given: the answer filter first (it completes "[来源 1]" into a whole marker), then the citer
    from chat.pipeline.generation import AnswerFilter

    answer_filter = AnswerFilter(valid_numbers={1, 2}, asset_ids=set())
    citer = EvidenceCiter(SOURCES, min_support=0.5)
    # when: split where the filter must hold the marker back
    text = "".join(filtered_stream(iter(["深圳每晚不超过700元。[来", "源 1]", "成都每晚不超过500元。"]),
                                   answer_filter, citer))
    # then: the model's marker kept, the uncited sentence cited
    assert text == ("深圳每晚不超过700元。[来源 1](citation://1)"
                    "成都每晚不超过500元[来源 1](citation://1)。")
    assert citer.attached == [1] and answer_filter.cited_numbers == [1]
