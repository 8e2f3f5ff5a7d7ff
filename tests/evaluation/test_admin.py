"""Evaluation sets and runs in the admin."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from evaluation.importers import CaseDraft
from evaluation.models import EvalCase, EvalSet
from evaluation.services import CaseOutcome, finish_run, import_eval_set, start_run
from knowledge import services
from knowledge.models import Visibility
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_logged_in(client, staff_user):
    client.force_login(staff_user)
    return client


@pytest.fixture
def finished_run(db):
    kb = make_kb()
    eval_set = import_eval_set(name="hr", knowledge_base=kb, cases=[
        CaseDraft(key="Q1", question="年假几天？", expected_documents=("员工手册",), expected_chunks=(),
                  answers=("十五天",), answerable=True),
    ]).eval_set
    run = start_run(eval_set=eval_set, label="hybrid(convex)", knowledge_base=kb, version=None,
                    config={"mode": "hybrid", "k": 5})
    return finish_run(
        run=run,
        outcomes=[CaseOutcome(
            case=EvalCase.objects.get(key="Q1"), gold=["员工手册"], gold_rank=2, latency_ms=12.5,
            retrieved=[{"rank": 1, "key": "document:9", "title": "差旅<script>标准", "document_id": 9, "chunk_id": 3},
                       {"rank": 2, "key": "员工手册", "title": "员工手册", "document_id": 1, "chunk_id": 1}],
            metrics={"recall@5": 1.0, "hit@5": 1.0, "mrr@10": 0.5, "ndcg@10": 0.6309},
        )],
        metrics={"recall@5": 1.0, "hit@5": 1.0, "mrr@10": 0.5, "ndcg@10": 0.6309},
        latency_ms={"p50": 12.5, "p95": 12.5, "stages": {"sparse": {"p50": 3.0, "p95": 3.0}}},
    )


def test_the_run_list_shows_config_metrics_and_revision(admin_client_logged_in, finished_run):
    page = admin_client_logged_in.get(reverse("admin:evaluation_evalrun_changelist")).content.decode()
    assert "hybrid(convex)" in page and "ndcg@10 0.6309" in page and "12.5" in page


def test_the_run_page_shows_metrics_stages_and_each_question_escaped(admin_client_logged_in, finished_run):
    # when
    page = admin_client_logged_in.get(reverse("admin:evaluation_evalrun_change", args=[finished_run.pk])).content.decode()

    # then
    rows = page.split('class="rag-case-results"')[1].split("</table>")[0]
    assert "年假几天？" in rows and "员工手册" in rows and "<td>2</td>" in rows
    assert "差旅&lt;script&gt;标准" in rows and "<script>标准" not in page
    assert "sparse" in page and "mrr@10" in page


def test_the_set_list_and_page_render_with_cases(admin_client_logged_in, finished_run):
    listing = admin_client_logged_in.get(reverse("admin:evaluation_evalset_changelist")).content.decode()
    detail = admin_client_logged_in.get(reverse("admin:evaluation_evalset_change", args=[finished_run.eval_set_id]))
    assert "hr" in listing and "导入评测集" in listing
    assert detail.status_code == 200 and "年假几天？" in detail.content.decode()


def test_a_csv_is_imported_from_the_admin_and_a_bad_one_is_refused_with_its_row(admin_client_logged_in):
    # given
    kb = make_kb()
    url = reverse("admin:evaluation_evalset_import")
    good = SimpleUploadedFile("hr.csv", "问题,期望文档,参考答案\n年假几天？,员工手册,十五天\n".encode())
    bad = SimpleUploadedFile("bad.csv", "问题,期望分块\n年假？,abc\n".encode())

    # when
    refused = admin_client_logged_in.post(url, {"name": "bad", "file": bad})
    accepted = admin_client_logged_in.post(url, {"name": "hr", "file": good, "knowledge_base": kb.pk, "default": "on"})

    # then
    assert refused.status_code == 200 and "第 2 行：期望分块必须是分块 ID" in refused.content.decode()
    assert not EvalSet.objects.filter(name="bad").exists()
    assert accepted.status_code == 302
    eval_set = EvalSet.objects.get(name="hr")
    assert eval_set.is_default and eval_set.knowledge_base == kb
    assert list(eval_set.cases.values_list("question", "expected_documents", "answers")) == [("年假几天？", ["员工手册"], ["十五天"])]


def test_an_answers_run_page_shows_routes_and_the_calibration_table(admin_client_logged_in, finished_run):
    # given
    from evaluation.models import EvalRun

    EvalRun.objects.filter(pk=finished_run.pk).update(kind="answers", metrics={
        "containment": 0.5, "routes": {"rag": 2}, "hit_types": {"rag": 1, "insufficient_context": 1},
        "calibration": [{"level": "high", "count": 1, "accuracy": 1.0, "answerable": 1},
                        {"level": "low", "count": 1, "accuracy": 0.0, "answerable": 1}],
    })

    # when
    page = admin_client_logged_in.get(reverse("admin:evaluation_evalrun_change", args=[finished_run.pk])).content.decode()

    # then
    assert "insufficient_context" in page and "100.00%" in page and "0.00%" in page and "containment" in page


@pytest.fixture
def two_runs(finished_run):
    """The finished run (A: Q1 found at rank 2) and a later one (B) that lost Q1 and found Q2."""
    from evaluation.models import EvalCaseResult

    eval_set = finished_run.eval_set
    import_eval_set(name=eval_set.name, knowledge_base=eval_set.knowledge_base, cases=[
        CaseDraft(key="Q1", question="年假几天？", expected_documents=("员工手册",), expected_chunks=(), answers=(), answerable=True),
        CaseDraft(key="Q2", question="病假<b>几天</b>？", expected_documents=("员工手册",), expected_chunks=(), answers=(), answerable=True),
    ])
    EvalCaseResult.objects.create(run=finished_run, case_key="Q2", question="病假<b>几天</b>？", gold_rank=None)
    later = start_run(eval_set=eval_set, label="sparse", knowledge_base=finished_run.knowledge_base, version=None,
                      config={"mode": "sparse", "k": 5})
    cases = {c.key: c for c in EvalCase.objects.filter(eval_set=eval_set)}
    later = finish_run(run=later, outcomes=[
        CaseOutcome(case=cases["Q1"], gold=["员工手册"], retrieved=[], gold_rank=None, metrics={}, latency_ms=3.0),
        CaseOutcome(case=cases["Q2"], gold=["员工手册"], retrieved=[], gold_rank=1, metrics={}, latency_ms=3.0),
    ], metrics={"recall@5": 0.5, "hit@5": 0.5, "mrr@10": 0.5, "ndcg@10": 0.5}, latency_ms={"p50": 3.0, "p95": 3.0})
    return finished_run, later


def test_two_runs_are_compared_metric_by_metric_and_question_by_question(admin_client_logged_in, two_runs):
    # given
    a, b = two_runs
    url = reverse("admin:evaluation_evalrun_changelist")

    # when: the action redirects to the comparison
    redirect = admin_client_logged_in.post(url, {"action": "compare", "_selected_action": [a.pk, b.pk]})
    page = admin_client_logged_in.get(redirect["Location"]).content.decode()

    # then
    assert redirect.status_code == 302
    metrics = page.split('class="rag-compare-metrics"')[1].split("</table>")[0]
    assert "ndcg@10" in metrics and "-13.1" in metrics  # 0.5 − 0.6309
    cases = page.split('class="rag-compare-cases"')[1].split("</table>")[0]
    assert 'class="change-lost"' in cases and 'class="change-gained"' in cases
    assert "病假&lt;b&gt;几天&lt;/b&gt;？" in cases and "<b>几天</b>" not in page


def test_comparing_needs_exactly_two_runs(admin_client_logged_in, finished_run):
    url = reverse("admin:evaluation_evalrun_changelist")
    response = admin_client_logged_in.post(url, {"action": "compare", "_selected_action": [finished_run.pk]}, follow=True)
    assert "请恰好选择两次运行进行对比" in response.content.decode()


def test_the_charts_page_draws_a_bar_per_run_per_metric_and_the_latency_scatter(admin_client_logged_in, two_runs):
    # given
    a, b = two_runs
    url = reverse("admin:evaluation_evalrun_changelist")

    # when
    redirect = admin_client_logged_in.post(url, {"action": "charts", "_selected_action": [a.pk, b.pk]})
    page = admin_client_logged_in.get(redirect["Location"]).content.decode()

    # then: four metrics × two runs, one scatter with both runs, served inline (no script, no CDN)
    assert page.count('<svg class="rag-chart"') == 5
    assert page.count("<rect ") == 8 and page.count("<circle ") == 2
    assert "ndcg@10" in page and "<script src=\"http" not in page


def test_the_shared_layout_is_imported_from_the_admin_as_its_two_files(admin_client_logged_in):
    # given
    queries = SimpleUploadedFile("queries.jsonl", '{"id": "Q1", "question": "年假几天？", "answers": ["十五天"]}'.encode())
    qrels = SimpleUploadedFile("qrels.jsonl", '{"query_id": "Q1", "doc_id": "D1"}'.encode())

    # when
    response = admin_client_logged_in.post(reverse("admin:evaluation_evalset_import"),
                                           {"name": "shared", "file": queries, "qrels": qrels})

    # then
    assert response.status_code == 302
    case = EvalSet.objects.get(name="shared").cases.get()
    assert (case.key, case.expected_documents, case.answers) == ("Q1", ["D1"], ["十五天"])


def test_a_name_taken_in_another_knowledge_base_is_imported_as_a_free_one(client, engineers_group, engineer_user):
    # given: an editor of one knowledge base, and a set of the name they want in a knowledge base
    # they cannot see
    mine = services.update_knowledge_base(kb=make_kb(), actor=None, editor_groups=[engineers_group])
    theirs = make_kb(visibility=Visibility.RESTRICTED)
    foreign = import_eval_set(name="回归集", knowledge_base=theirs, cases=[
        CaseDraft(key="S1", question="机密问题？", expected_documents=("机密文件",), expected_chunks=(), answers=(), answerable=True),
    ]).eval_set
    engineer_user.is_staff = True
    engineer_user.save()
    client.force_login(engineer_user)
    url = reverse("admin:evaluation_evalset_import")

    def upload(name: str):
        csv = SimpleUploadedFile(f"{name}.csv", "问题,期望文档\n年假几天？,员工手册\n".encode())
        return client.post(url, {"name": name, "file": csv, "knowledge_base": mine.pk})

    # when
    taken, free = upload("回归集"), upload("新的集")

    # then: both answered alike, each a set of the editor's knowledge base; the other is untouched
    ours, new = EvalSet.objects.get(name="回归集", knowledge_base=mine), EvalSet.objects.get(name="新的集")
    assert (taken.status_code, taken["Location"]) == (302, reverse("admin:evaluation_evalset_change", args=[ours.pk]))
    assert (free.status_code, free["Location"]) == (302, reverse("admin:evaluation_evalset_change", args=[new.pk]))
    foreign.refresh_from_db()
    assert foreign.knowledge_base == theirs
    assert list(foreign.cases.values_list("key", "question")) == [("S1", "机密问题？")]
