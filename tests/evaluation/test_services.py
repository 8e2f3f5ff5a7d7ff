"""Importing evaluation sets: idempotent, by key, one default per knowledge base."""

from __future__ import annotations

import pytest

from evaluation.importers import CaseDraft
from evaluation.models import EvalCase, EvalCaseResult, EvalSet
from evaluation.services import finish_run, import_eval_set, start_run, CaseOutcome
from ragsite.errors import ValidationFailed
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db


def draft(key: str, question: str = "年假几天？", documents=("员工手册",)) -> CaseDraft:
    return CaseDraft(key=key, question=question, expected_documents=tuple(documents), expected_chunks=(),
                     answers=("十五天",), answerable=bool(documents))


def test_importing_the_same_cases_twice_changes_nothing():
    # given
    first = import_eval_set(name="hr", cases=[draft("1"), draft("2", "病假几天？")])

    # when
    again = import_eval_set(name="hr", cases=[draft("1"), draft("2", "病假几天？")])

    # then
    assert (first.created, first.updated, first.removed) == (2, 0, 0)
    assert (again.created, again.updated, again.removed, again.unchanged) == (0, 0, 0, 2)
    assert EvalCase.objects.count() == 2


def test_a_changed_file_updates_adds_and_removes_by_key_and_old_results_keep_their_question():
    # given: a run recorded a result for case 2
    kb = make_kb()
    first = import_eval_set(name="hr", cases=[draft("1"), draft("2", "病假几天？")])
    case_two = EvalCase.objects.get(key="2")
    run = start_run(eval_set=first.eval_set, label="hybrid", knowledge_base=kb, version=None, config={})
    finish_run(run=run, outcomes=[CaseOutcome(case=case_two, gold=["员工手册"], retrieved=[], gold_rank=None,
                                              metrics={}, latency_ms=1.0)], metrics={}, latency_ms={})

    # when: case 1 changes, 2 goes, 3 arrives
    outcome = import_eval_set(name="hr", cases=[draft("1", "年假有多少天？"), draft("3", "事假？")])

    # then
    assert (outcome.created, outcome.updated, outcome.removed) == (1, 1, 1)
    assert list(EvalCase.objects.order_by("ordinal").values_list("key", "question")) == [("1", "年假有多少天？"), ("3", "事假？")]
    kept = EvalCaseResult.objects.get(run=run)
    assert (kept.case, kept.case_key, kept.question) == (None, "2", "病假几天？")


def test_a_knowledge_base_has_one_default_set():
    # given
    kb = make_kb()
    import_eval_set(name="old", cases=[draft("1")], knowledge_base=kb, default=True)

    # when
    import_eval_set(name="new", cases=[draft("1")], knowledge_base=kb, default=True)

    # then
    assert list(EvalSet.objects.filter(is_default=True).values_list("name", flat=True)) == ["new"]


def test_a_default_set_needs_a_knowledge_base_and_a_set_needs_a_name():
    with pytest.raises(ValidationFailed, match="默认评测集必须属于一个知识库"):
        import_eval_set(name="x", cases=[draft("1")], default=True)
    with pytest.raises(ValidationFailed, match="请填写评测集名称"):
        import_eval_set(name="  ", cases=[draft("1")])
    assert not EvalSet.objects.exists()


def test_names_are_per_knowledge_base():
    # given
    hr, it = make_kb(), make_kb()
    # when
    hr_set = import_eval_set(name="回归集", cases=[draft("1")], knowledge_base=hr).eval_set
    it_set = import_eval_set(name="回归集", cases=[draft("1", "VPN 怎么连？")], knowledge_base=it).eval_set
    again = import_eval_set(name="回归集", cases=[draft("1", "年假有多少天？"), draft("2")], knowledge_base=hr)
    unfiled = import_eval_set(name="回归集", cases=[draft("1")]).eval_set
    # then: one set per knowledge base (and one without), each importing into its own
    assert len({hr_set.pk, it_set.pk, unfiled.pk}) == 3 and again.eval_set.pk == hr_set.pk
    assert (again.created, again.updated) == (1, 1)
    assert list(it_set.cases.values_list("question", flat=True)) == ["VPN 怎么连？"]
    assert unfiled.knowledge_base is None
