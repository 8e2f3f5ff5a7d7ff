"""The ablation's HyDE and dynamic top-k rows with a generative provider: the fake
OpenAI-compatible server on 127.0.0.1 (chat, rewrite, rerank) through the real `openai` SDK, over
a small dataset built through real ingestion into Milvus Lite."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from evaluation.models import EvalRun
from tests.evaluation.test_evaluate_retrieval import write_dataset

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_hyde_row_runs_with_a_generative_model_and_is_charged_for_it(
    tmp_path, settings, openai_provider, milvus, database_tasks, media_root
):
    # given: a built dataset, and prices for the fake models (by model name, without the provider)
    settings.RAG_MODEL_PRICES = {"fake-chat": {"input": 0.001, "output": 0.002}}
    dataset = write_dataset(tmp_path)
    call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--build", "--mode", "sparse",
                 stdout=io.StringIO())
    output = tmp_path / "report.json"

    # when
    out = io.StringIO()
    call_command("evaluate_retrieval", "--dataset", str(dataset), "--kb", "eval", "--ablation",
                 "--output", str(output), stdout=out)

    # then: HyDE ran once per question, and its calls, tokens and time are in the row
    report = {run["name"]: run for run in json.loads(output.read_text(encoding="utf-8"))["runs"]}
    hyde = report["hybrid + HyDE"]
    assert "skipped" not in hyde
    assert hyde["usage"]["calls_per_1000"]["hyde"] == 1000.0
    assert hyde["usage"]["tokens_per_1000"]["hyde"] > 0
    assert hyde["usage"]["cost_per_1000_by_kind"]["hyde"] > 0
    assert hyde["usage"]["cost_per_1000"] > report["hybrid"]["usage"]["cost_per_1000"]
    assert "hyde" not in report["hybrid"]["usage"]["calls_per_1000"]
    assert {"hyde_generation", "channel:dense:hyde"} <= set(hyde["latency_ms"]["stages"])
    assert hyde["degraded_queries"] == 3  # the fake's fixed text is no JSON rewrite: only the rewrite fails
    run = EvalRun.objects.get(pk=hyde["run_id"])
    assert run.config["hyde"] is True
    assert {row.details["hyde"]["status"] for row in run.results.all()} == {"ran"}
    # then: the dynamic top-k row ran on the fake reranker's scores and says how much it kept
    dynamic = report["hybrid + dynamic top-k"]
    assert dynamic["dynamic_top_k"]["questions"] == 3 and 1 <= dynamic["dynamic_top_k"]["mean_kept"] <= 10
    text = out.getvalue()
    assert "skipped" not in text
    assert "hybrid + HyDE" in text and "hyde 1000 / " in text
