"""The last step of `make bench`: every figure beside the baseline measured in the same run.

Reads bench-results/{ingest,retrieval,chat}.json (those present; load.json too when
`make bench-load` wrote one) and writes
bench-results/latest.json and bench-results/latest.md: one row per figure with its baseline
(raw pymilvus insert, bare batch-encode, raw Milvus search, NumPy brute force, bare retrieval)
and the ratio figure / baseline. Missing benchmarks are listed, not guessed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .common import RESULTS


@dataclass(frozen=True)
class Row:
    benchmark: str
    figure: str
    value: float | None
    unit: str
    baseline: str
    baseline_value: float | None

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.baseline_value:
            return None
        return round(self.value / self.baseline_value, 3)


def ingest_rows(data: dict) -> list[Row]:
    rows = []
    for name, run in (data.get("corpora") or {}).items():
        rows.append(Row("ingest", f"pipeline in process, {name}", run["chunks_per_second"], "chunks/s",
                        "raw pymilvus insert", run["raw_baseline"]["chunks_per_second"]))
    for name, run in (data.get("cli") or {}).items():
        rows.append(Row("ingest", f"{name}, {run['documents']} files", run["chunks_per_second"], "chunks/s",
                        "raw pymilvus insert", run["raw_baseline"]["chunks_per_second"]))
        rows.append(Row("ingest", f"{name}, {run['documents']} files", run["chunks_per_second"], "chunks/s",
                        "bare batch-encode", run.get("bare_encode_chunks_per_second")))
    large = data.get("large")
    if large:
        rows.append(Row("ingest", f"manage.py ingest, {large['documents']} files", large["chunks_per_second"],
                        "chunks/s", "—", None))
    return rows


def retrieval_rows(data: dict) -> list[Row]:
    rows = []
    for run in data.get("runs") or []:
        size = run["chunks"]
        raw = {"dense": run["raw_milvus_dense_ms"]["p50"], "sparse": run["raw_milvus_sparse_ms"]["p50"]}
        raw["hybrid"] = max(raw.values())
        for mode, service in run["service_ms"].items():
            rows.append(Row("retrieval", f"{mode} p50, {size} chunks", service["p50"], "ms",
                            "raw Milvus search p50" + (" (slower channel)" if mode == "hybrid" else ""), raw[mode]))
        rows.append(Row("retrieval", f"dense p50, {size} chunks", run["service_ms"]["dense"]["p50"], "ms",
                        "NumPy brute force p50", run["numpy_bruteforce_ms"]["p50"]))
    return rows


def chat_rows(data: dict) -> list[Row]:
    rows = []
    for kb, result in (data.get("kbs") or {}).items():
        for cache in ("uncached", "cached"):
            block = result.get(cache) or {}
            bare = (block.get("bare_retrieve_ms") or {}).get("p50")
            for figure in ("retrieval", "first_delta"):
                value = (block.get(f"{figure}_ms") or {}).get("p50")
                rows.append(Row("chat", f"{kb} {cache}: time to {figure.replace('_', ' ')} p50", value, "ms",
                                "bare retrieval p50", bare))
    return rows


def load_rows(data: dict) -> list[Row]:
    rows = []
    base, load = data.get("baseline") or {}, data.get("load") or {}
    if base and load:
        clients = f"{load['chat_concurrency']}+{load['retrieval_concurrency']} clients, ingesting"
        for kind, figure, label in (("chat", "first_delta_ms", "chat time to first delta"),
                                    ("chat", "total_ms", "chat time to [DONE]"),
                                    ("retrieval", "total_ms", "retrieval")):
            for q in ("p50", "p95", "p99"):
                rows.append(Row("load", f"{label} {q}, {clients}", load[kind][figure][q], "ms",
                                f"one client, worker idle, {q}", base[kind][figure][q]))
        for kind in ("chat", "retrieval"):
            rows.append(Row("load", f"{kind} throughput, {clients}", load[kind]["per_second"], "requests/s",
                            "one client, worker idle", base[kind]["per_second"]))
            rows.append(Row("load", f"{kind} errors, {clients}", load[kind]["errors"], "requests", "—", None))
    ramp = data.get("ramp")
    if ramp:
        rows.append(Row("load", "ramp: clients of each kind held (no errors, within the latency limits)",
                        ramp["capacity_level"], "clients", "—", None))
    for name, growth in ((data.get("soak") or {}).get("rss") or {}).get("growth", {}).items():
        rows.append(Row("load", f"soak {data['soak']['wall_seconds']:.0f} s: {name} RSS at the end", growth["end_mb"],
                        "MB", "at the start", growth["start_mb"]))
    return rows


READERS = {"ingest": ingest_rows, "retrieval": retrieval_rows, "chat": chat_rows}
# Run on their own (make bench-load), not by `make bench`: included when present, never "missing".
OPTIONAL_READERS = {"load": load_rows}


def summarize(results: Path = RESULTS) -> dict:
    rows, missing, sources = [], [], {}
    for name, read in {**READERS, **OPTIONAL_READERS}.items():
        path = results / f"{name}.json"
        if not path.exists():
            if name in READERS:
                missing.append(name)
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        sources[name] = data.get("created", "")
        rows.extend(read(data))
    return {
        "sources": sources, "missing": missing,
        "rows": [{**asdict(row), "ratio": row.ratio} for row in rows],
    }


def markdown(summary: dict) -> str:
    lines = ["| benchmark | figure | value | baseline (same run) | baseline value | ratio |", "|---|---|---|---|---|---|"]
    for row in summary["rows"]:
        value = "—" if row["value"] is None else f"{row['value']} {row['unit']}"
        base = "—" if row["baseline_value"] is None else f"{row['baseline_value']} {row['unit']}"
        ratio = "—" if row["ratio"] is None else f"{row['ratio']}"
        lines.append(f"| {row['benchmark']} | {row['figure']} | {value} | {row['baseline']} | {base} | {ratio} |")
    if summary["missing"]:
        lines.append("")
        lines.append("Not run: " + ", ".join(summary["missing"]))
    return "\n".join(lines) + "\n"


def main() -> None:
    summary = summarize()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2), encoding="utf-8")
    text = markdown(summary)
    (RESULTS / "latest.md").write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {RESULTS / 'latest.json'} and {RESULTS / 'latest.md'}")


if __name__ == "__main__":
    main()
