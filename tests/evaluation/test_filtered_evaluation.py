"""Evaluation under metadata filters: `evaluate_retrieval --filter` and `evaluate_answers --filter`
retrieve every question from the documents the filters admit, and the runs keep the filters in
their configuration, shown in words on the run's admin page."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from evaluation.models import EvalCaseResult, EvalRun, RunKind
from knowledge.documents import services as document_services
from knowledge.models import Document, KnowledgeBase
from tests.evaluation.test_evaluate_retrieval import write_dataset

pytestmark = pytest.mark.django_db(transaction=True)

HR_TITLES = {"field": "title", "op": "in", "value": ["年假制度", "差旅标准"]}


@pytest.fixture
def built_eval_kb(tmp_path, milvus, database_tasks, media_root):
    """The small shared-layout corpus as the published knowledge base `eval`, its two HR
    documents filed under 人力资源部."""
    dataset = write_dataset(tmp_path)
    call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--build", "--mode", "sparse",
                 stdout=io.StringIO())
    kb = KnowledgeBase.objects.get(slug="eval")
    for title in ("年假制度", "差旅标准"):
        document_services.set_document_attributes(
            document=Document.objects.get(knowledge_base=kb, title=title), attributes={"部门": "人力资源部"}, actor=None)
    EvalRun.objects.all().delete()
    return dataset


def test_evaluate_retrieval_retrieves_every_question_under_the_filters(built_eval_kb, tmp_path, client, staff_user):
    # when: the VPN question's document is outside the filter
    output = tmp_path / "report.json"
    call_command("evaluate_retrieval", "--dataset", str(built_eval_kb), "--kb", "eval", "--mode", "sparse", "--k", "2",
                 "--filter", json.dumps(HR_TITLES, ensure_ascii=False), "--output", str(output), stdout=io.StringIO())
    # then
    report = json.loads(output.read_text(encoding="utf-8"))
    assert report["filters"] == [{"field": "title", "op": "in", "value": ["年假制度", "差旅标准"]}]
    run = EvalRun.objects.get()
    assert run.config["filters"] == report["filters"]
    assert run.metrics["hit@2"] == pytest.approx(2 / 3, abs=1e-3)
    vpn = EvalCaseResult.objects.get(run=run, case_key="Q3")
    assert vpn.gold_rank is None
    assert {row["title"] for row in vpn.retrieved} <= {"年假制度", "差旅标准"}
    # and: the run's page says which filters it ran under
    client.force_login(staff_user)
    page = client.get(reverse("admin:evaluation_evalrun_change", args=[run.pk])).content.decode()
    assert "元数据筛选" in page and "标题 是 年假制度、差旅标准 之一" in page


def test_repeated_filters_must_all_hold(built_eval_kb):
    # when: HR's documents, and of those the ones about travel
    call_command("evaluate_retrieval", "--dataset", str(built_eval_kb), "--kb", "eval", "--mode", "sparse", "--k", "2",
                 "--filter", '{"field": "部门", "op": "eq", "value": "人力资源部"}',
                 "--filter", '{"field": "title", "op": "eq", "value": "差旅标准"}', stdout=io.StringIO())
    # then: only the travel question finds its document
    run = EvalRun.objects.get()
    assert [f["field"] for f in run.config["filters"]] == ["attributes.部门", "title"]
    found = dict(EvalCaseResult.objects.filter(run=run).values_list("case_key", "gold_rank"))
    assert found == {"Q1": None, "Q2": 1, "Q3": None}


@pytest.mark.parametrize("given,words", [
    ("{oops", "不是 JSON"),
    ('{"field": "部门", "op": "near", "value": "x"}', "第 1 个筛选条件：不认识的运算"),
])
def test_a_bad_filter_stops_the_command_before_any_run(built_eval_kb, given, words):
    with pytest.raises(CommandError, match=words):
        call_command("evaluate_retrieval", "--dataset", str(built_eval_kb), "--kb", "eval", "--mode", "sparse",
                     "--filter", given, stdout=io.StringIO())
    assert not EvalRun.objects.exists()


def test_evaluate_answers_asks_every_question_under_the_filters(built_eval_kb, tmp_path):
    # given: two questions, one of them about a document outside the filter
    questions = tmp_path / "qa.jsonl"
    questions.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in [
        {"id": "A1", "question": "入职满一年的员工每年有几天带薪年假？", "expected_documents": ["年假制度"], "answers": ["十五天"]},
        {"id": "A2", "question": "打印机卡纸时先做什么？", "expected_documents": ["打印机"], "answers": ["关闭电源"]},
    ]), encoding="utf-8")
    call_command("import_eval_set", str(questions), "--name", "qa", stdout=io.StringIO())
    # when
    call_command("evaluate_answers", "--eval-set", "qa", "--kb", "eval",
                 "--filter", '{"field": "部门", "op": "eq", "value": "人力资源部"}', stdout=io.StringIO())
    # then
    run = EvalRun.objects.get(kind=RunKind.ANSWERS)
    assert run.config["filters"] == [{"field": "attributes.部门", "op": "eq", "value": "人力资源部"}]
    rows = {row.case_key: row for row in EvalCaseResult.objects.filter(run=run)}
    assert "十五天" in rows["A1"].answer
    assert rows["A2"].details["declined"] is True
