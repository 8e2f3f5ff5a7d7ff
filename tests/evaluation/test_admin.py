"""Evaluation sets and runs in the admin."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from evaluation.importers import CaseDraft
from evaluation.models import EvalCase, EvalSet
from evaluation.services import CaseOutcome, finish_run, import_eval_set, start_run
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
