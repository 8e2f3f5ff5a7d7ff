"""`manage.py evaluate_retrieval` over a small dataset in the shared eval layout."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from evaluation.bm25 import BM25
from evaluation.datasets import DatasetError, load_dataset
from knowledge.models import Document, KnowledgeBase

CORPUS = [
    {"id": "D1", "title": "年假制度", "text": "入职满一年的员工每年享有十五天带薪年假。"},
    {"id": "D2", "title": "差旅标准", "text": "一线城市住宿标准为每晚六百元，其他城市每晚四百元。"},
    {"id": "D3", "title": "VPN 使用", "text": "远程办公需要安装 VPN 客户端，并用公司邮箱账号登录。"},
    {"id": "D4", "title": "打印机", "text": "打印机卡纸时先关闭电源，再打开后盖取出纸张。"},
]
QUERIES = [
    {"id": "Q1", "question": "年假有几天？", "answer": "十五天"},
    {"id": "Q2", "question": "一线城市住宿标准是多少？", "answer": "六百元"},
    {"id": "Q3", "question": "远程办公怎么连 VPN？", "answer": "VPN 客户端"},
]
QRELS = [{"query_id": "Q1", "doc_id": "D1"}, {"query_id": "Q2", "doc_id": "D2"}, {"query_id": "Q3", "doc_id": "D3"}]


def write_dataset(directory, corpus=CORPUS, queries=QUERIES, qrels=QRELS):
    for name, rows in (("corpus", corpus), ("queries", queries), ("qrels", qrels)):
        (directory / f"{name}.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    return directory


@pytest.mark.django_db(transaction=True)
def test_build_evaluate_and_write_json(tmp_path, milvus, database_tasks, media_root):
    # given
    dataset = write_dataset(tmp_path)
    output = tmp_path / "report.json"
    out = io.StringIO()
    # when
    call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--build", "--k", "2",
                 "--output", str(output), stdout=out)
    # then
    report = json.loads(output.read_text(encoding="utf-8"))
    assert [run["mode"] for run in report["runs"]] == ["dense", "sparse", "hybrid"]
    assert report["baseline"]["mode"] == "bm25-baseline"
    for run in [*report["runs"], report["baseline"]]:
        assert set(run["metrics"]) == {"recall@2", "hit@2", "mrr@10", "ndcg@10"}
        assert run["latency_ms"]["p50"] > 0
    # Three distinct questions over four distinct passages: every mode finds each one.
    for run in report["runs"]:
        assert run["degraded_queries"] == 0
        assert run["metrics"]["hit@2"] == 1.0, run
    assert report["baseline"]["metrics"]["mrr@10"] == 1.0
    kb = KnowledgeBase.objects.get(slug="eval")
    assert sorted(Document.objects.filter(knowledge_base=kb).values_list("external_id", flat=True)) == ["D1", "D2", "D3", "D4"]
    assert kb.active_version is not None
    assert "hybrid" in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_build_is_idempotent(tmp_path, milvus, database_tasks, media_root):
    dataset = write_dataset(tmp_path)
    call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--build", "--mode", "sparse", stdout=io.StringIO())
    out = io.StringIO()
    call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--build", "--mode", "sparse", stdout=out)
    assert "uploaded 0, skipped 4" in out.getvalue()
    assert Document.objects.count() == 4


@pytest.mark.django_db
def test_missing_kb_without_build_is_refused(tmp_path):
    with pytest.raises(CommandError, match="不存在"):
        call_command("evaluate_retrieval", "--dataset", str(write_dataset(tmp_path)), "--kb", "nope")


def test_dataset_errors_are_clear(tmp_path):
    write_dataset(tmp_path, qrels=[{"query_id": "Q1", "doc_id": "MISSING"}])
    with pytest.raises(DatasetError, match="不存在的文档"):
        load_dataset(tmp_path)
    (tmp_path / "queries.jsonl").write_text("{not json", encoding="utf-8")
    with pytest.raises(DatasetError, match="不是合法的 JSON"):
        load_dataset(tmp_path)


def test_limit_keeps_the_first_queries(tmp_path):
    assert [q.id for q in load_dataset(write_dataset(tmp_path), limit=2).queries] == ["Q1", "Q2"]


def test_bm25_baseline_ranks_the_matching_passage_first():
    index = BM25([(row["id"], row["title"] + row["text"]) for row in CORPUS])
    assert index.search("打印机卡纸怎么办", k=2)[0] == "D4"
    assert index.search("火星探测器", k=2) == []


@pytest.mark.django_db(transaction=True)
def test_every_configuration_is_stored_as_a_run_with_a_row_per_question(tmp_path, milvus, database_tasks, media_root):
    # given
    from evaluation.models import EvalCaseResult, EvalRun, EvalSet, RunStatus

    dataset = write_dataset(tmp_path)

    # when
    out = io.StringIO()
    call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--build", "--k", "2",
                 "--mode", "sparse", "--mode", "hybrid", stdout=out)

    # then: the dataset became an evaluation set; each run has its rows, gold and rank
    eval_set = EvalSet.objects.get(name=dataset.name)
    assert eval_set.cases.count() == 3
    runs = list(EvalRun.objects.order_by("id"))
    assert [r.label for r in runs] == ["sparse", "hybrid"]
    kb = KnowledgeBase.objects.get(slug="eval")
    for run in runs:
        assert run.status == RunStatus.SUCCEEDED and run.case_count == 3
        assert run.version_number == kb.active_version.number and run.knowledge_base == kb
        assert run.metrics["hit@2"] == 1.0 and run.latency_ms["p50"] > 0 and run.latency_ms["stages"]
        assert f"run #{run.pk}" in out.getvalue()
    row = EvalCaseResult.objects.get(run=runs[0], case_key="Q2")
    assert row.gold == ["D2"] and row.gold_rank == 1 and row.retrieved[0]["key"] == "D2"
    assert row.metrics["mrr@10"] == 1.0


@pytest.mark.django_db(transaction=True)
def test_a_stored_set_can_be_evaluated_by_name_with_titles_as_gold(tmp_path, milvus, database_tasks, media_root):
    # given: the KB built from the dataset, and a native set naming documents by title
    from evaluation.models import EvalCaseResult

    dataset = write_dataset(tmp_path)
    call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--build", "--mode", "sparse",
                 stdout=io.StringIO())
    native = tmp_path / "native.csv"
    native.write_text("编号,问题,期望文档\nN1,打印机卡纸怎么办？,打印机\nN2,今天天气如何？,\n", encoding="utf-8")
    imported = io.StringIO()
    call_command("import_eval_set", str(native), "--name", "native", "--kb", "eval", "--default", stdout=imported)

    # when
    out = io.StringIO()
    call_command("evaluate_retrieval", "--eval-set", "native", "--kb", "eval", "--mode", "sparse", "--k", "1", stdout=out)

    # then: the unanswerable question is not scored for retrieval; the titled one is found first
    assert "2 cases (1 unanswerable)" in imported.getvalue() and "default of eval" in imported.getvalue()
    assert "native: 1 queries" in out.getvalue()
    row = EvalCaseResult.objects.get(case_key="N1")
    assert row.gold == ["打印机"] and row.gold_rank == 1


@pytest.mark.django_db
def test_evaluate_retrieval_needs_a_dataset_or_a_set(tmp_path):
    with pytest.raises(CommandError, match="--dataset"):
        call_command("evaluate_retrieval", "--kb", "eval", stdout=io.StringIO())
    with pytest.raises(CommandError, match="评测集 missing 不存在"):
        call_command("evaluate_retrieval", "--eval-set", "missing", "--kb", "evalkb", stdout=io.StringIO())
    with pytest.raises(CommandError, match="--build 需要 --dataset"):
        call_command("evaluate_retrieval", "--eval-set", "missing", "--kb", "evalkb", "--build", stdout=io.StringIO())


@pytest.mark.django_db
def test_import_eval_set_reports_bad_files_and_missing_paths(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("question\n\n", encoding="utf-8")
    with pytest.raises(CommandError, match="没有评测问题"):
        call_command("import_eval_set", str(bad), stdout=io.StringIO())
    with pytest.raises(CommandError, match="找不到路径"):
        call_command("import_eval_set", str(tmp_path / "nope.csv"), stdout=io.StringIO())
    with pytest.raises(CommandError, match="知识库 nokb 不存在"):
        call_command("import_eval_set", str(bad), "--kb", "nokb", stdout=io.StringIO())


class CountingRewriter:
    name = "fake-rewrite"

    def __init__(self):
        self.calls = 0

    def rewrite(self, question):
        self.calls += 1
        return question + " 相关规定"


class CountingReranker:
    name = "fake-rerank"

    def __init__(self):
        self.calls = 0

    def rerank(self, query, documents, *, top_n):
        from engines.ports import RerankScore

        self.calls += 1
        return [RerankScore(index=i, score=1.0 - i / 100) for i in range(min(top_n, len(documents)))]


@pytest.mark.django_db(transaction=True)
def test_the_ablation_switches_each_stage_off_for_real_and_prices_the_calls(
    tmp_path, milvus, database_tasks, media_root, monkeypatch, settings
):
    # given: a rewriter and a reranker that count their calls, and list prices for them
    from evaluation import runner
    from evaluation.models import EvalRun

    settings.RAG_MODEL_PRICES = {"fake-rerank": {"input": 0.002}, "fake-rewrite": {"input": 0.001, "output": 0.002}}
    dataset = write_dataset(tmp_path)
    call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--build", "--mode", "sparse",
                 stdout=io.StringIO())
    rewriter, reranker, calls_by_run = CountingRewriter(), CountingReranker(), {}
    real_build = runner.build_retrieval_service

    def build(kb):
        service = real_build(kb)
        service.rewriter, service.reranker = rewriter, reranker
        return service

    monkeypatch.setattr(runner, "build_retrieval_service", build)
    real_evaluate = runner.evaluate_mode

    def evaluate(**kwargs):
        before = (rewriter.calls, reranker.calls)
        report = real_evaluate(**kwargs)
        calls_by_run[report["run_id"]] = (rewriter.calls - before[0], reranker.calls - before[1])
        return report

    from evaluation.management.commands import evaluate_retrieval as command

    monkeypatch.setattr(command, "evaluate_mode", evaluate)

    # when
    out = io.StringIO()
    call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--ablation", stdout=out)

    # then: each configuration called exactly the stages it names, three questions each; HyDE
    # is skipped without a generative chat model (the local provider), and says so
    runs = {run.label: run for run in EvalRun.objects.order_by("id")[1:]}
    assert list(runs) == ["dense", "sparse", "hybrid+rewrite+rerank", "hybrid+rerank", "hybrid+rewrite",
                          "hybrid+rewrite+rerank+parents", "hybrid+rewrite+rerank+dynamic"]
    assert [calls_by_run[run.pk] for run in runs.values()] == [(0, 0), (0, 0), (3, 3), (0, 3), (3, 0), (3, 3), (3, 3)]
    assert not any(s.startswith("channel:sparse") for s in runs["dense"].latency_ms["stages"])
    assert not any(s.startswith("channel:dense") for s in runs["sparse"].latency_ms["stages"])
    assert runs["hybrid+rewrite"].usage["calls_per_1000"]["rewrite"] == 1000.0
    assert "rerank" not in runs["hybrid+rewrite"].usage["calls_per_1000"]
    assert runs["hybrid+rewrite+rerank"].usage["cost_per_1000"] > runs["hybrid+rerank"].usage["cost_per_1000"] > 0
    assert runs["dense"].usage["cost_per_1000"] == 0.0  # the local embedder has no price
    report = out.getvalue()
    assert "hybrid − rewrite" in report and "hybrid + parent expansion" in report and "stage p50/p95 ms" in report
    assert "hybrid + HyDE                      skipped: no generative chat model" in report
    assert "hybrid + dynamic top-k: kept " in report


@pytest.mark.django_db(transaction=True)
def test_milvus_down_during_an_evaluation_is_a_message_and_a_failed_run(tmp_path, milvus, database_tasks, media_root, settings):
    # given: a built knowledge base, then the vector store goes away
    from engines.milvus_store import reset_vector_store_cache
    from evaluation.models import EvalRun

    dataset = write_dataset(tmp_path)
    call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--build", "--mode", "sparse",
                 stdout=io.StringIO())
    settings.MILVUS_URI = "http://127.0.0.1:9"
    reset_vector_store_cache()

    # when / then
    try:
        with pytest.raises(CommandError, match="sparse: .*retrieval_unavailable"):
            call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--mode", "sparse",
                         stdout=io.StringIO())
    finally:
        reset_vector_store_cache()
    failed = EvalRun.objects.order_by("-id").first()
    assert failed.status == "failed" and "AllChannelsFailed" in failed.error
