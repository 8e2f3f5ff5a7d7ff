"""Reading evaluation cases: the shared layout and the native JSONL / CSV / XLSX table."""

from __future__ import annotations

import io
import json

import openpyxl
import pytest

from evaluation.importers import read_native_file, read_shared_dataset
from ragsite.errors import ValidationFailed


def test_the_shared_layout_gives_one_case_per_query_with_its_gold_documents(tmp_path):
    # given
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in [
        {"id": "Q1", "question": "年假几天？", "answers": ["十五天"]},
        {"id": "Q2", "question": "火星上几点？"},
    ]), encoding="utf-8")
    (tmp_path / "qrels.jsonl").write_text(json.dumps({"query_id": "Q1", "doc_id": "D1"}), encoding="utf-8")

    # when
    cases = read_shared_dataset(tmp_path)

    # then: Q2 has neither gold nor answer: it is unanswerable
    assert [(c.key, c.expected_documents, c.answers, c.answerable) for c in cases] == [
        ("Q1", ("D1",), ("十五天",), True), ("Q2", (), (), False),
    ]


def test_a_native_csv_with_chinese_headers_and_several_values_per_cell():
    # given
    data = "编号,问题,期望文档,参考答案,可回答\nA1,年假几天？,员工手册|年假制度.docx,十五天｜15 天,\nA2,火星几点？,,,否\n"

    # when
    cases = read_native_file("set.csv", data.encode("utf-8-sig"))

    # then
    assert cases[0].expected_documents == ("员工手册", "年假制度.docx")
    assert cases[0].answers == ("十五天", "15 天") and cases[0].answerable
    assert (cases[1].key, cases[1].answerable) == ("A2", False)


def test_a_native_xlsx_and_jsonl_give_the_same_cases():
    # given
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.append(["question", "expected_documents", "expected_chunks", "answers"])
    sheet.append(["VPN 多久断开？", "IT 手册", 42, "30 分钟"])
    buffer = io.BytesIO()
    workbook.save(buffer)
    jsonl = json.dumps({"question": "VPN 多久断开？", "expected_documents": ["IT 手册"], "expected_chunks": [42],
                        "answers": ["30 分钟"]}, ensure_ascii=False)

    # when
    from_xlsx = read_native_file("set.xlsx", buffer.getvalue())
    from_jsonl = read_native_file("set.jsonl", jsonl.encode())

    # then: rows without an id are numbered from 1
    assert from_xlsx == from_jsonl
    assert from_xlsx[0].key == "1" and from_xlsx[0].expected_chunks == (42,)


@pytest.mark.parametrize("name, data, message", [
    ("set.csv", "question,answers\n,十五天\n", "第 2 行：缺少问题"),
    ("set.csv", "question,expected_chunks\n年假？,abc\n", "期望分块必须是分块 ID"),
    ("set.csv", "question,answerable\n年假？,也许\n", "可回答一栏只能填"),
    ("set.jsonl", '{"question": "a"}\nnot json\n', "第 2 行：不是合法的 JSON"),
    ("set.jsonl", '["a list"]\n', "每行必须是一个 JSON 对象"),
    ("set.csv", "id,question\nX,一\nX,二\n", "编号 X 重复"),
    ("set.csv", "question\n", "没有评测问题"),
    ("set.txt", "question\n年假？\n", "不支持的评测文件类型"),
    ("set.xlsx", "not a workbook", "不是可读取的 XLSX 文件"),
])
def test_bad_files_are_refused_with_the_row_and_the_reason(name, data, message):
    with pytest.raises(ValidationFailed) as error:
        read_native_file(name, data.encode())
    assert message in str(error.value.message)


def test_a_shared_folder_without_qrels_is_a_clear_error(tmp_path):
    (tmp_path / "queries.jsonl").write_text('{"id": "Q1", "question": "年假？"}', encoding="utf-8")
    with pytest.raises(ValidationFailed, match="缺少文件"):
        read_shared_dataset(tmp_path)
