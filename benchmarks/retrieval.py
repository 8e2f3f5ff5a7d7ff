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
import random
import time

import numpy as np

from .common import percentile, print_table, setup_django, write_results

VOCABULARY = (
    "员工 年假 报销 差旅 住宿 标准 审批 流程 系统 账号 密码 邮箱 打印机 会议室 预订 网络 无线 访客 "
    "路由器 信号 覆盖 面积 保修 售后 网点 型号 规格 天线 频段 速率 功耗 尺寸 重量 固件 升级 指示灯 "
    "红色 绿色 闪烁 重启 恢复 出厂 设置 管理员 权限 申请 工单 优先级 响应 时限 部门 主管 财务 发票 "
    "合同 供应商 采购 预算 季度 年度 考核 培训 入职 离职 社保 公积金 体检 加班 调休 远程 办公 安全 "
    "数据 备份 加密 病毒 补丁 服务器 存储 数据库 接口 文档 版本 发布 回滚 测试 上线 客户 订单 物流"
).split()
PRODUCTS = ["星河X1", "星河X3", "X3 Pro", "星河X5 Mesh", "VPN客户端", "Wi-Fi 6", "Outlook"]
UNITS = ["天", "元", "小时", "分钟", "GHz", "Mbps", "平方米", "个月"]


def sentence(rng: random.Random) -> str:
    words = rng.sample(VOCABULARY, rng.randint(5, 9))
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), rng.choice(PRODUCTS))
    if rng.random() < 0.4:
        words.insert(rng.randrange(len(words)), f"{rng.randint(1, 999)}{rng.choice(UNITS)}")
    return "".join(words) + rng.choice("。；！")


def chunk_text(rng: random.Random) -> str:
    return "".join(sentence(rng) for _ in range(rng.randint(4, 8)))


def build_corpus(size: int, *, chunks_per_document: int = 100, seed: int = 7):
    """A published KB with `size` chunks: rows in the database, vectors in Milvus."""
    from knowledge import services
    from knowledge.models import Chunk, Document, DocumentStatus
    from engines.milvus_store import get_vector_store
    from engines.ports import ChunkRecord
    from engines.providers import get_embedder

    rng = random.Random(seed + size)
    kb = services.create_knowledge_base(slug=f"bench-{size}", name=f"bench {size}", actor=None)
    draft = services.create_draft_version(kb=kb, actor=None)
    texts = [chunk_text(rng) for _ in range(size)]
    documents = Document.objects.bulk_create(
        Document(
            knowledge_base=kb, title=f"合成文档 {n}", file=f"bench/{size}/{n}", original_name=f"{n}.txt",
            file_type="txt", mime_type="text/plain", sha256=f"{size:08d}{n:056d}", size=1,
            status=DocumentStatus.READY,
        )
        for n in range((size + chunks_per_document - 1) // chunks_per_document)
    )
    draft.documents.set(documents)
    chunks = Chunk.objects.bulk_create(
        (
            Chunk(
                document=documents[i // chunks_per_document], knowledge_base=kb,
                ordinal=i % chunks_per_document, parent_id=f"p{i // 5}", content=text, token_count=len(text),
            )
            for i, text in enumerate(texts)
        ),
        batch_size=2000,
    )
    embedder = get_embedder(kb.embedding_model, kb.embedding_dimension)
    started = time.perf_counter()
    vectors = np.zeros((size, kb.embedding_dimension), dtype=np.float32)
    for start in range(0, size, 256):
        vectors[start : start + 256] = embedder.embed_documents(texts[start : start + 256])
    embed_seconds = time.perf_counter() - started
    store = get_vector_store(embedding_model=kb.embedding_model, dimension=kb.embedding_dimension)
    started = time.perf_counter()
    for start in range(0, size, 2000):
        store.upsert_chunks([
            ChunkRecord(chunk_id=c.pk, kb_id=kb.pk, document_id=c.document_id, content=c.content,
                        content_type="text", vector=vectors[start + j].tolist())
            for j, c in enumerate(chunks[start : start + 2000])
        ])
    upsert_seconds = time.perf_counter() - started
    services.mark_version_ready(version=draft)
    services.activate_version(version=draft, actor=None, reason="benchmark")
    kb.refresh_from_db()
    ids = np.array([c.pk for c in chunks])
    return kb, texts, vectors, ids, {"embed_seconds": round(embed_seconds, 2), "upsert_seconds": round(upsert_seconds, 2)}


def make_queries(texts: list[str], count: int, seed: int = 11) -> list[str]:
    """Short spans cut from random chunks: each query has a real answer in the corpus."""
    rng = random.Random(seed)
    queries = []
    for _ in range(count):
        text = rng.choice(texts)
        start = rng.randrange(max(1, len(text) - 14))
        queries.append(text[start : start + rng.randint(6, 14)])
    return queries


def measure(size: int, queries_count: int, top_k: int, candidate_k: int) -> dict:
    from pymilvus import MilvusClient

    from django.conf import settings

    from retrieval.contracts import RetrievalRequest
    from retrieval.factory import build_retrieval_service
    from engines.milvus_store import get_vector_store
    from engines.providers import get_embedder

    kb, texts, vectors, ids, build = build_corpus(size)
    queries = make_queries(texts, queries_count)
    service = build_retrieval_service(kb)
    embedder = get_embedder(kb.embedding_model, kb.embedding_dimension)
    query_vectors = [embedder.embed_query(q) for q in queries]
    store = get_vector_store(embedding_model=kb.embedding_model, dimension=kb.embedding_dimension)
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
    args = parser.parse_args()
    stop = setup_django()
    try:
        runs = [measure(int(size), args.queries, args.top_k, args.candidate_k) for size in args.sizes.split(",")]
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
