"""Answer evaluation: the judge on hand-made turns, and evaluate_answers through RAGService."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from django.core.management import CommandError, call_command

from evaluation.answers import calibration, contains_any, judge
from evaluation.models import EvalCaseResult, EvalRun, RunKind
from evaluation.services import CaseOutcome
from tests.evaluation.test_evaluate_retrieval import write_dataset


def case(answers=("十五天",), answerable=True):
    return SimpleNamespace(answers=list(answers), answerable=answerable)


def turn(answer, *, hit_type="rag", intent="KNOWLEDGE_QUERY", citations=()):
    return SimpleNamespace(answer=answer, hit_type=hit_type, intent=SimpleNamespace(intent=intent),
                           citations=[SimpleNamespace(cited=c[0], text=c[1]) for c in citations])


def test_containment_ignores_citation_markers_and_whitespace():
    assert contains_any("每年享有十 五天[来源 1](citation://1)年假", ["十五天"])
    assert not contains_any("每年享有十天", ["十五天"])


def test_a_cited_source_that_holds_the_answer_makes_the_citation_valid():
    # given: the answer is right, but only the uncited source holds the phrase
    result = turn("年假十五天。[来源 1]", citations=[(True, "病假三十天。"), (False, "年假十五天。")])

    # when
    scores = judge(case(), result)

    # then
    assert scores == {"containment": 1.0, "first_line": 1.0, "citation_valid": 0.0, "declined": 0.0,
                      "correct": 1.0, "chars": 6.0}


def test_an_answer_that_cites_nothing_has_no_valid_citation_even_when_its_context_held_the_answer():
    result = turn("年假十五天。", citations=[(False, "年假十五天。")])
    assert judge(case(), result)["citation_valid"] == 0.0


def test_declining_is_right_only_when_no_document_answers():
    refusal = turn("根据当前知识库无法确定。", hit_type="insufficient_context")
    assert judge(case(answers=(), answerable=False), refusal) == {"declined": 1.0, "correct": 1.0}
    assert judge(case(), refusal)["correct"] == 0.0
    assert judge(case(answers=(), answerable=False), turn("火星很冷。", intent="OUT_OF_SCOPE"))["correct"] == 1.0


def test_calibration_reports_accuracy_per_confidence_level_of_answers_with_declines_apart():
    # given: two high answers (one right), one low answer (wrong), two declines (one right)
    def outcome(level, correct, answerable=True, declined=False):
        return CaseOutcome(case=SimpleNamespace(answerable=answerable), gold=[], retrieved=[], gold_rank=None,
                           metrics={"correct": correct, "declined": float(declined)}, latency_ms=1.0,
                           details={"confidence": level, "declined": declined})

    table = calibration([
        outcome("high", 1.0), outcome("high", 0.0), outcome("low", 0.0),
        outcome("low", 1.0, answerable=False, declined=True), outcome("low", 0.0, declined=True),
    ])

    # then
    assert table == [
        {"level": "high", "count": 2, "accuracy": 0.5, "answerable": 2},
        {"level": "low", "count": 1, "accuracy": 0.0, "answerable": 1},
        {"level": "declined", "count": 2, "accuracy": 0.5, "answerable": 1},
    ]


def test_first_line_is_the_first_line_that_says_something():
    from evaluation.answers import first_line

    assert first_line("\n[来源 1](citation://1)\n年假 7 天。[来源 1](citation://1)\n其他。") == "年假 7 天。[来源 1](citation://1)"


@pytest.mark.django_db(transaction=True)
def test_evaluate_answers_runs_every_question_through_the_chat_pipeline_and_stores_it(
    tmp_path, milvus, database_tasks, media_root
):
    # given: the small corpus published, and a native set with one question no document answers
    dataset = write_dataset(tmp_path)
    call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--build", "--mode", "sparse",
                 stdout=io.StringIO())
    native = tmp_path / "qa.jsonl"
    native.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in [
        {"id": "A1", "question": "入职满一年的员工每年有几天带薪年假？", "expected_documents": ["年假制度"], "answers": ["十五天"]},
        {"id": "A2", "question": "一线城市住宿标准每晚多少钱？", "expected_documents": ["差旅标准"], "answers": ["六百元"]},
        {"id": "U1", "question": "公司火星分部的前台电话是多少？", "answerable": False},
        {"id": "F1", "question": "那一线城市住宿标准每晚多少钱？", "answers": ["六百元"], "category": "follow_up",
         "history": ["入职满一年的员工每年有几天带薪年假？"]},
    ]), encoding="utf-8")
    call_command("import_eval_set", str(native), "--name", "qa", stdout=io.StringIO())

    # when
    out = io.StringIO()
    call_command("evaluate_answers", "--eval-set", "qa", "--kb", "eval", "--output", str(tmp_path / "a.json"), stdout=out)

    # then
    run = EvalRun.objects.get(kind=RunKind.ANSWERS)
    assert run.case_count == 4 and run.metrics["answerable"] == 3 and run.metrics["unanswerable"] == 1
    assert run.metrics["containment"] == 1.0 and run.metrics["citation_validity"] == 1.0
    assert run.metrics["insufficient_context_rate"] == 1.0 and run.metrics["first_line"] == 1.0
    assert sum(row["count"] for row in run.metrics["calibration"]) == 4
    assert run.metrics["categories"]["follow_up"] == {"count": 1, "right": 1, "first_line": 1, "clarified": 0}
    # the follow-up was asked after its history, in one conversation
    from chat.models import Conversation

    follow_up = EvalCaseResult.objects.get(run=run, case_key="F1")
    conversation = Conversation.objects.get(traces__trace_id=follow_up.details["trace_id"])
    assert conversation.messages.filter(role="user").count() == 2
    row = EvalCaseResult.objects.get(run=run, case_key="A1")
    assert "十五天" in row.answer and row.citations and row.details["route"] and row.details["confidence"]
    report = out.getvalue()
    assert f"run #{run.pk}" in report and "insufficient_context_rate" in report and "confidence" in report
    assert json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))["run_id"] == run.pk
    from django.contrib.auth import get_user_model

    asker = get_user_model().objects.get(username="evaluation")
    assert asker.is_staff and not asker.has_usable_password()  # nobody can sign in as it


@pytest.mark.django_db
def test_evaluate_answers_needs_a_known_kb_and_set():
    with pytest.raises(CommandError, match="--dataset"):
        call_command("evaluate_answers", "--kb", "x", stdout=io.StringIO())
    with pytest.raises(CommandError, match="知识库 x 不存在"):
        call_command("evaluate_answers", "--kb", "x", "--eval-set", "y", stdout=io.StringIO())

