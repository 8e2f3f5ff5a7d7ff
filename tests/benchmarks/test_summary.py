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
