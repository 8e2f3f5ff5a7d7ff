"""make bench-retrieval: RetrievalService latency per mode at 1k / 10k / 100k chunks.

Synthetic Chinese chunks (a seeded generator over a fixed vocabulary) are embedded with the local
provider and indexed in Milvus Lite (served on loopback, as in `make run`); chunk and document rows
are real database rows of an active version. For each size and mode the same queries are timed
through the full RetrievalService (READY facts, channels, fusion, rows; cache off), through raw
pymilvus searches on the same collection, and through a NumPy brute-force top-k over the same
vectors. The service's overhead is reported as a ratio to the raw Milvus time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from .common import SYNTHETIC_EMBEDDING_MODEL, build_corpus, make_queries, percentile, print_table, setup_django, write_results


def measure(size: int, queries_count: int, top_k: int, candidate_k: int, embedding_model: str,
            chunks_per_document: int = 100) -> dict:
    from pymilvus import MilvusClient

    from django.conf import settings

    from retrieval.contracts import RetrievalRequest
    from retrieval.factory import build_retrieval_service
    from knowledge.vectors import store_for
    from engines.providers import get_embedder

    kb, texts, vectors, ids, build = build_corpus(size, embedding_model=embedding_model,
                                                   chunks_per_document=chunks_per_document)
    queries = make_queries(texts, queries_count)
    service = build_retrieval_service(kb)
    embedder = get_embedder(kb.embedding_model, kb.embedding_dimension)
    query_vectors = [embedder.embed_query(q) for q in queries]
    store = store_for(kb)
    collection = store.chunks_collection
    client = MilvusClient(uri=settings.MILVUS_URI)
    expr = f"kb_id == {kb.pk}"

    def run_service(mode: str) -> list[float]:
        timings = []
        for question in queries:
            started = time.perf_counter()
            service.retrieve(RetrievalRequest(kb_id=kb.pk, question=question, top_k=top_k, mode=mode,
                                              candidate_k=candidate_k, use_cache=False))
            timings.append((time.perf_counter() - started) * 1000)
        return timings

    def run_raw_dense() -> list[float]:
        timings = []
        for vector in query_vectors:
            started = time.perf_counter()
            client.search(collection, data=[vector], anns_field="dense", limit=candidate_k, filter=expr,
                          search_params={"metric_type": "COSINE"}, output_fields=["document_id"])
            timings.append((time.perf_counter() - started) * 1000)
        return timings

    def run_raw_sparse() -> list[float]:
        timings = []
        for question in queries:
            started = time.perf_counter()
            client.search(collection, data=[question], anns_field="sparse", limit=candidate_k, filter=expr,
                          search_params={"metric_type": "BM25"}, output_fields=["document_id"])
            timings.append((time.perf_counter() - started) * 1000)
        return timings

    def run_numpy() -> list[float]:
        timings = []
        for vector in query_vectors:
            started = time.perf_counter()
            scores = vectors @ np.asarray(vector, dtype=np.float32)
            best = np.argpartition(-scores, candidate_k)[:candidate_k]
            ids[best[np.argsort(-scores[best])]]
            timings.append((time.perf_counter() - started) * 1000)
        return timings

    # Warm-up: load collections, jieba, the tokenizer, connections.
    for mode in ("dense", "sparse", "hybrid"):
        service.retrieve(RetrievalRequest(kb_id=kb.pk, question=queries[0], mode=mode, use_cache=False))
    run_raw_dense(), run_raw_sparse()

    raw_dense, raw_sparse, brute = run_raw_dense(), run_raw_sparse(), run_numpy()
    result = {
        "chunks": size,
        "documents": (size + chunks_per_document - 1) // chunks_per_document,
        "queries": len(queries),
        "build": build,
        "raw_milvus_dense_ms": {"p50": percentile(raw_dense, 50), "p95": percentile(raw_dense, 95)},
        "raw_milvus_sparse_ms": {"p50": percentile(raw_sparse, 50), "p95": percentile(raw_sparse, 95)},
        "numpy_bruteforce_ms": {"p50": percentile(brute, 50), "p95": percentile(brute, 95)},
        "service_ms": {},
    }
    raw_for_mode = {
        "dense": percentile(raw_dense, 50),
        "sparse": percentile(raw_sparse, 50),
        # The service runs both channels concurrently: the floor is the slower one.
        "hybrid": max(percentile(raw_dense, 50), percentile(raw_sparse, 50)),
    }
    for mode in ("dense", "sparse", "hybrid"):
        timings = run_service(mode)
        p50 = percentile(timings, 50)
        result["service_ms"][mode] = {
            "p50": p50, "p95": percentile(timings, 95),
            "overhead_ratio_vs_raw_milvus_p50": round(p50 / raw_for_mode[mode], 2) if raw_for_mode[mode] else None,
        }
    client.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--candidate-k", type=int, default=30)
    parser.add_argument("--embedding-model", default=SYNTHETIC_EMBEDDING_MODEL,
                        help="embedder of the synthetic corpora (local-e5-small-v1 for its query cost; slow to build)")
    parser.add_argument("--chunks-per-document", type=int, default=100,
                        help="how the chunks are grouped into documents (fewer: more documents for the READY facts)")
    args = parser.parse_args()
    stop = setup_django()
    try:
        runs = [measure(int(size), args.queries, args.top_k, args.candidate_k, args.embedding_model,
                        args.chunks_per_document)
                for size in args.sizes.split(",")]
        rows = []
        for run in runs:
            for mode in ("dense", "sparse", "hybrid"):
                service = run["service_ms"][mode]
                raw = run["raw_milvus_dense_ms"] if mode == "dense" else run["raw_milvus_sparse_ms"]
                rows.append([
                    run["chunks"], mode, service["p50"], service["p95"],
                    raw["p50"] if mode != "hybrid" else f"{run['raw_milvus_dense_ms']['p50']}/{run['raw_milvus_sparse_ms']['p50']}",
                    run["numpy_bruteforce_ms"]["p50"] if mode == "dense" else "",
                    service["overhead_ratio_vs_raw_milvus_p50"],
                ])
        print_table(["chunks", "mode", "service p50", "service p95", "raw milvus p50", "numpy p50", "service/raw"], rows)
        path = write_results("retrieval", {"provider": "local", "top_k": args.top_k, "candidate_k": args.candidate_k, "runs": runs})
        print(f"\nwrote {path}")
    finally:
        stop()


if __name__ == "__main__":
    main()
