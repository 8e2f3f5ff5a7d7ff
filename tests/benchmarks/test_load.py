"""make bench-load, smoke-sized: the real benchmark in a subprocess (Milvus Lite, daphne, the
ingestion worker, a scratch var dir), its JSON checked for the figures the report promises."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.load import levels_up_to, rss_growth

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    output = tmp_path_factory.mktemp("bench-load") / "load.json"
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL"}}
    database = os.environ.get("DATABASE_URL", "")
    # On PostgreSQL (CI) the benchmark runs there too, in a scratch database it drops at the end.
    extra = ["--database-url", database] if database.startswith(("postgres://", "postgresql://")) else []
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.load", "--quick", "--output", str(output), *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        # SIGTERM is the benchmark's own clean stop (daphne, worker, Milvus, scratch data);
        # a plain kill on timeout would leave them running for the rest of the suite.
        os.killpg(process.pid, signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        pytest.fail("bench-load --quick did not finish in 400 s:\n" + stdout[-3000:] + stderr[-3000:])
    assert process.returncode == 0, stdout[-3000:] + stderr[-3000:]
    return json.loads(output.read_text(encoding="utf-8")), stdout


def test_the_quick_load_run_answers_every_request_while_documents_are_ingested(quick_run):
    # given: the quick run (2 chat streams + 2 retrieval clients, 24 requests, uploads meanwhile)
    results, _stdout = quick_run
    load = results["load"]

    # then: every request of the bounded budget was answered, none failed
    assert results["benchmark"] == "load" and results["provider"] == "local"
    expected = "postgresql" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"
    assert results["database"] == expected
    assert (load["chat_concurrency"], load["retrieval_concurrency"]) == (2, 2)
    assert load["chat"]["requests"] + load["retrieval"]["requests"] == load["max_requests"] == 24
    assert load["chat"]["errors"] == load["retrieval"]["errors"] == load["upload"]["errors"] == 0
    assert load["chat"]["errors_by_kind"] == load["retrieval"]["errors_by_kind"] == {}
    for block, figure in ((load["chat"], "first_delta_ms"), (load["chat"], "total_ms"), (load["retrieval"], "total_ms")):
        timing = block[figure]
        assert timing["n"] == block["ok"] > 0
        assert 0 < timing["p50"] <= timing["p95"] <= timing["p99"] <= timing["max"] < 60_000
    assert load["chat"]["first_delta_ms"]["p50"] <= load["chat"]["total_ms"]["p50"]
    assert load["chat"]["per_second"] > 0 and load["retrieval"]["per_second"] > 0
    assert 0 < load["wall_seconds"] <= load["max_seconds"] + load["request_timeout_seconds"]


def test_the_quick_load_run_ingests_publishes_and_keeps_the_index_consistent(quick_run):
    results, _stdout = quick_run
    load, final = results["load"], results["final"]

    # then: the uploads of the load phase ended ready, the draft was published, Milvus agrees
    assert load["upload"]["files"] == load["ingestion"]["uploaded"] >= 1
    assert final["drain"]["pending"] == 0 and set(final["drain"]["statuses"]) == {"ready"}
    assert final["draft"]["status"] == "ready"
    assert final["draft"]["documents"] == results["build"]["documents"] + load["ingestion"]["uploaded"]
    assert final["publish_status"] == 200
    assert final["check_index"]["returncode"] == 0, final["check_index"]["output"]
    assert final["worker_alive"] and final["daphne_alive"]


def test_the_quick_load_run_samples_the_memory_of_every_process_and_lifts_the_limits(quick_run):
    results, stdout = quick_run
    rss = results["load"]["rss"]

    # then: daphne, the worker and Milvus were sampled, at least at the start and the end
    assert len(rss["samples"]) >= 2
    for process in ("daphne", "worker", "milvus"):
        assert all(sample[process] and sample[process] > 10 for sample in rss["samples"])
        assert rss["growth"][process]["start_mb"] > 0
    # the abuse limits did not cap the load (an empty rate is no limit)
    assert all(rate is None for rate in results["throttle"]["rates"].values())
    assert results["settings"]["DEBUG"] is False
    assert "ms p50/p95/p99" in stdout and "wrote" in stdout


def test_growth_leaves_out_the_warm_up_and_compares_medians_of_the_first_and_last_samples():
    # given: a model loaded in the first tenth, one GC spike, then a slow climb
    series = [50.0, 100.0, 140.0, 100.0, 101.0, 102.0, 104.0, 110.0, 110.0, 110.0, 110.0]
    samples = [{"t": 10.0 * n, "worker": value} for n, value in enumerate(series)]

    # when
    growth = rss_growth(samples, "worker")

    # then
    assert (growth["start_mb"], growth["end_mb"], growth["max_mb"], growth["first_mb"]) == (100.0, 110.0, 140.0, 50.0)
    assert growth["growth_pct"] == 10.0 and growth["warmup_seconds"] == 10.0
    climbing = rss_growth([{"t": 10.0 * n, "daphne": 500.0 + n} for n in range(60)], "daphne")
    assert climbing["slope_mb_per_min"] == 6.0
    flat = rss_growth([{"t": float(t), "daphne": 500.0} for t in range(0, 600, 10)], "daphne")
    assert (flat["growth_pct"], flat["slope_mb_per_min"]) == (0.0, 0.0)
    assert rss_growth([{"t": 0.0, "milvus": None}], "milvus")["growth_pct"] is None


def test_ramp_levels_double_up_to_the_maximum():
    assert levels_up_to(64) == [1, 2, 4, 8, 16, 32, 64]
    assert levels_up_to(12) == [1, 2, 4, 8, 12]
    assert levels_up_to(1) == [1]
