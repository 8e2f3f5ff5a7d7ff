"""Quantities a question states and the ranges a line holds (the extractive answerer's range fit)."""

from __future__ import annotations

import math

import pytest

from chat.answering.extractive.quantities import Quantity, Range, fit, number, ranges_in, stated_quantities
from engines.ports import ChatMessage
from tests.chat.answering.notation import PromptAnswerer


@pytest.mark.parametrize(("text", "value"), [
    ("3", 3.0), ("1,000", 1000.0), ("2.5", 2.5), ("三", 3.0), ("十二", 12.0), ("两", 2.0), ("一万", 10000.0),
    ("二十五", 25.0), ("x", None),
])
def test_numbers_are_read_as_people_write_them(text, value):
    assert number(text) == value


def test_a_question_states_what_it_gives_not_what_it_asks():
    assert Quantity(3.0, "年") in stated_quantities("我入职三年了，能休几天年假？")
    assert stated_quantities("报销一万块要谁批") == (Quantity(10000.0, "元"),)
    assert stated_quantities("年假有几天？") == ()
    assert stated_quantities("保修多少年？") == ()


def test_ranges_as_rules_and_tables_write_them():
    assert ranges_in("| 满 1 年不满 10 年 | 5天 |") == (Range(1.0, 10.0, "年"),)
    assert ranges_in("| 满 20 年及以上 | 15天 |") == (Range(20.0, math.inf, "年"),)
    assert ranges_in("入职不满 1 年的员工不享受年假") == (Range(0.0, 1.0, "年"),)
    assert ranges_in("单笔 5000 元以下由部门经理审批，超过 20000 元须财务总监审批。") == (
        Range(0.0, 5000.0, "元"), Range(20000.0, math.inf, "元"))
    assert ranges_in("5,000 元（含）至 20,000 元由部门总监加签") == (Range(5000.0, 20001.0, "元"),)
    assert ranges_in("当年未休完的年假可顺延至次年 3 月 31 日") == ()


def test_fit_takes_in_leaves_out_or_says_nothing():
    stated = stated_quantities("我入职三年了，能休几天年假？")
    assert fit(stated, "| 满 1 年不满 10 年 | 7天 |") == 1
    assert fit(stated, "| 满 10 年不满 20 年 | 12天 |") == -1
    assert fit(stated, "当年未休完的年假可顺延至次年 3 月 31 日。") == 0
    assert fit((), "| 满 1 年不满 10 年 | 7天 |") == 0


def test_the_answer_is_the_row_whose_range_takes_the_stated_quantity_in():
    # given: the tenure table and a rule about carrying leave over, all about 年假
    context = """<knowledge_context>
[来源 1] 员工手册 > 年假
当年未休完的年假可顺延至次年 3 月 31 日，逾期作废。
| 累计工作年限 | 年假天数 |
| --- | --- |
| 满 1 年不满 10 年 | 7天 |
| 满 10 年不满 20 年 | 12天 |
| 满 20 年及以上 | 17天 |
</knowledge_context>

问题：{question}"""
    def ask(question: str) -> str:
        return PromptAnswerer().complete([ChatMessage("system", "你是企业知识库助手。"),
                                          ChatMessage("user", context.format(question=question))])

    # when
    three = ask("我工作三年了，年假有几天？")
    twelve = ask("工作满12年的年假有几天？")
    # then
    assert "7天" in three and "12天" not in three
    assert "12天" in twelve and "7天" not in twelve
