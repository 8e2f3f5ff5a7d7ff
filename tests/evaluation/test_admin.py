"""Evaluation sets and runs in the admin."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from evaluation.admin import run_label_words, source_label
from evaluation.importers import CaseDraft
from evaluation.models import EvalCase, EvalSet
from evaluation.services import CaseOutcome, finish_run, import_eval_set, start_run
from knowledge.catalog import services as catalog_services
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


def test_the_run_list_shows_config_metrics_and_latency_in_words(admin_client_logged_in, finished_run):
    # when
    page = admin_client_logged_in.get(reverse("admin:evaluation_evalrun_changelist")).content.decode()

    # then: the configuration and the metrics in words, each code as the tooltip
    assert '<span class="rag-code" title="hybrid(convex)">混合检索（语义 + 关键词） · 加权融合</span>' in page
    assert "12.5" in page and "延迟中位数（毫秒）" in page
    assert '<div title="ndcg@10"><span class="rag-nowrap">排序质量@10</span> 0.6309</div>' in page
    assert '<span class="rag-nowrap">召回率@5</span> 1.0000' in page


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

    # then: codes in words, each code kept quietly beside its words
    assert "insufficient_context" in page and "100.00%" in page and "0.00%" in page and "containment" in page
    assert "信息不足" in page and "文档问答" in page and "答对率" in page and "高" in page


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
    assert "<td>B 丢失</td>" in cases and "<td>B 新找到</td>" in cases and "<td>lost</td>" not in cases
    assert "排序质量@10" in metrics
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
    assert "排序质量@10" in page and "<script src=\"http" not in page


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
    mine = catalog_services.update_knowledge_base(kb=make_kb(), actor=None, editor_groups=[engineers_group])
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


def test_a_run_page_names_its_parameters_metrics_stages_and_model_in_words(admin_client_logged_in, finished_run):
    # given
    from evaluation.models import EvalRun

    EvalRun.objects.filter(pk=finished_run.pk).update(embedding_model="local-e5-small-v1", latency_ms={
        "p50": 12.5, "p95": 12.5, "stages": {"channel:sparse:original": {"p50": 3.0, "p95": 3.0}}})

    # when
    page = admin_client_logged_in.get(reverse("admin:evaluation_evalrun_change", args=[finished_run.pk])).content.decode()

    # then
    assert "检索方式" in page and "混合检索（语义 + 关键词）" in page and "评估前几个结果（k）" in page
    assert "排序质量@10" in page and "按名次加权的综合得分" in page
    assert "关键词检索（原问题）" in page and "95% 的问题不超过" in page
    assert "e5-small 多语言语义模型（本地运行，中英文问题都能按意思检索）" in page
    assert ">token<" not in page.lower()
    # and: the page is titled with the configuration in words
    assert f"<h2>#{finished_run.pk} hr 混合检索（语义 + 关键词） · 加权融合</h2>" in page
    assert f"&rsaquo; #{finished_run.pk} hr 混合检索" in page


def test_the_set_page_says_where_its_questions_came_from_and_lists_values_one_a_line(admin_client_logged_in):
    # given: the demo's built-in set
    kb = make_kb()
    eval_set = import_eval_set(name="demo", knowledge_base=kb, source="demo.questions", cases=[
        CaseDraft(key="D01", question="年假几天？", expected_documents=("员工手册", "handbook.md"), expected_chunks=(),
                  answers=("7 天",), answerable=True),
    ]).eval_set

    # when
    page = admin_client_logged_in.get(reverse("admin:evaluation_evalset_change", args=[eval_set.pk])).content.decode()

    # then
    assert '<span class="rag-code" title="demo.questions">演示知识库内置评测集</span>' in page
    assert "\n员工手册\nhandbook.md</textarea>" in page and "[&quot;员工手册&quot;" not in page
    assert "每行一个：标题、文件名或外部 ID。" in page


def test_the_set_page_saves_lines_as_lists_and_refuses_a_chunk_that_is_not_a_number(admin_client_logged_in):
    # given
    kb = make_kb()
    eval_set = import_eval_set(name="hr", knowledge_base=kb, cases=[
        CaseDraft(key="Q1", question="年假几天？", expected_documents=("员工手册",), expected_chunks=(), answers=(), answerable=True),
    ]).eval_set
    case = eval_set.cases.get()
    url = reverse("admin:evaluation_evalset_change", args=[eval_set.pk])

    def post(chunks: str):
        return admin_client_logged_in.post(url, {
            "name": "hr", "description": "", "knowledge_base": kb.pk,
            "cases-TOTAL_FORMS": "1", "cases-INITIAL_FORMS": "1", "cases-MIN_NUM_FORMS": "0", "cases-MAX_NUM_FORMS": "1000",
            "cases-0-id": case.pk, "cases-0-eval_set": eval_set.pk, "cases-0-key": "Q1", "cases-0-question": "年假几天？",
            "cases-0-expected_documents": "员工手册\n\n handbook.md ", "cases-0-expected_chunks": chunks,
            "cases-0-answers": "7 天\n七天", "cases-0-answerable": "on",
        })

    # when
    refused, saved = post("12\nabc"), post("12\n13")

    # then
    assert refused.status_code == 200 and "请每行填写一个分块编号（数字）。" in refused.content.decode()
    assert saved.status_code == 302
    case.refresh_from_db()
    assert (case.expected_documents, case.expected_chunks, case.answers) == (["员工手册", "handbook.md"], [12, 13], ["7 天", "七天"])


@pytest.mark.parametrize(("source", "shown"), [
    ("", "—"), ("hr.csv", "导入的文件 hr.csv"),
    ("/data/eval/hr.xlsx", '<span class="rag-code" title="/data/eval/hr.xlsx">导入的文件 hr.xlsx</span>'),
    ("../shared/eval/cmrc", '<span class="rag-code" title="../shared/eval/cmrc">共享评测集目录 cmrc</span>'),
])
def test_a_set_source_is_named_in_words(source, shown):
    # when
    words = str(source_label(source))

    # then: the words, with the whole path as the tooltip when the name alone does not say it
    assert words == shown


@pytest.mark.parametrize(("label", "words"), [
    ("hybrid(convex)+rerank", "混合检索（语义 + 关键词） · 加权融合 + 重排"), ("sparse", "关键词检索"),
    ("dense+rewrite+parents", "语义检索 + 问题改写 + 父块扩展"), ("rag", "完整问答流程"), ("我的配置", "我的配置"),
])
def test_a_run_configuration_is_named_in_words(label, words):
    # when
    shown = run_label_words(label)

    # then
    assert shown == words
