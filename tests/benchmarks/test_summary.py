"""make bench's summary: each figure beside its same-run baseline, with the ratio."""

from __future__ import annotations

import json

from benchmarks.summary import markdown, summarize


def write(directory, name, payload):
    (directory / f"{name}.json").write_text(json.dumps({"created": "2026-12-01T15:00:00", **payload}), encoding="utf-8")


def test_every_figure_sits_beside_its_baseline_and_missing_benchmarks_are_named(tmp_path):
    # given: an ingest and a retrieval result, no chat result
    write(tmp_path, "ingest", {"corpora": {}, "cli": {"manage.py ingest (e5)": {
        "documents": 300, "chunks_per_second": 7.3, "raw_baseline": {"chunks_per_second": 7.2},
        "bare_encode_chunks_per_second": 7.2}}, "large": None})
    write(tmp_path, "retrieval", {"runs": [{
        "chunks": 1000, "raw_milvus_dense_ms": {"p50": 4.0}, "raw_milvus_sparse_ms": {"p50": 2.0},
        "numpy_bruteforce_ms": {"p50": 0.5},
        "service_ms": {"dense": {"p50": 8.0}, "sparse": {"p50": 5.0}, "hybrid": {"p50": 12.0}},
    }]})

    # when
    summary = summarize(tmp_path)

    # then
    rows = {(r["figure"], r["baseline"]): r for r in summary["rows"]}
    assert rows[("manage.py ingest (e5), 300 files", "bare batch-encode")]["ratio"] == 1.014
    assert rows[("hybrid p50, 1000 chunks", "raw Milvus search p50 (slower channel)")]["ratio"] == 3.0
    assert rows[("dense p50, 1000 chunks", "NumPy brute force p50")]["ratio"] == 16.0
    assert summary["missing"] == ["chat"]
    table = markdown(summary)
    assert "| retrieval | sparse p50, 1000 chunks | 5.0 ms | raw Milvus search p50 | 2.0 ms | 2.5 |" in table
    assert "Not run: chat" in table


def test_a_figure_without_a_baseline_has_no_ratio(tmp_path):
    write(tmp_path, "ingest", {"corpora": {}, "cli": {}, "large": {"documents": 100000, "chunks_per_second": 196.2}})
    [row] = summarize(tmp_path)["rows"]
    assert row["ratio"] is None and row["baseline"] == "—"


def test_the_load_figures_sit_beside_the_one_client_baseline_and_are_never_missing(tmp_path):
    # given: a bench-load result with its baseline, load and soak phases
    def phase(chat, retrieval, first_delta_p95, per_second):
        timing = {"p50": 100.0, "p95": first_delta_p95, "p99": first_delta_p95}
        return {"chat_concurrency": chat, "retrieval_concurrency": retrieval, "wall_seconds": 600.4,
                "chat": {"first_delta_ms": timing, "total_ms": timing, "per_second": per_second, "errors": 0},
                "retrieval": {"total_ms": timing, "per_second": per_second, "errors": 0}}
    soak = phase(2, 2, 300.0, 3.0) | {"rss": {"growth": {"daphne": {"start_mb": 500.0, "end_mb": 510.0}}}}
    write(tmp_path, "load", {"baseline": phase(1, 1, 200.0, 2.0), "load": phase(4, 4, 800.0, 5.0), "soak": soak})

    # when
    summary = summarize(tmp_path)

    # then
    rows = {r["figure"]: r for r in summary["rows"]}
    first_delta = rows["chat time to first delta p95, 4+4 clients, ingesting"]
    assert (first_delta["baseline"], first_delta["ratio"]) == ("one client, worker idle, p95", 4.0)
    assert rows["chat throughput, 4+4 clients, ingesting"]["ratio"] == 2.5
    assert rows["soak 600 s: daphne RSS at the end"]["ratio"] == 1.02
    assert "load" not in summary["missing"]
    assert "load" not in summarize(tmp_path / "nothing-here")["missing"]
