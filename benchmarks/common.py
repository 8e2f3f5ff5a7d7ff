"""Shared set-up for benchmarks: a scratch environment with the real components.

Each benchmark run gets its own temporary var directory (SQLite unless DATABASE_URL is set,
media), its own Milvus Lite server on loopback (as `make run` uses it) and the local provider.
Results go to bench-results/<name>.json and a table on stdout. Benchmarks are not tests: they
measure, they do not assert.
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench-results"


def setup_django() -> Callable[[], None]:
    """Configure Django on a scratch var dir and a private Milvus Lite server; returns stop()."""
    scratch = Path(tempfile.mkdtemp(prefix="ragsite-bench-"))
    os.environ["RAGSITE_VAR_DIR"] = str(scratch)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragsite.settings.local")
    os.environ["DJANGO_LOG_LEVEL"] = "WARNING"
    os.environ["MILVUS_COLLECTION_PREFIX"] = "bench"

    from tests.milvus import start_milvus_lite

    uri, stop_milvus = start_milvus_lite(scratch / "milvus")
    os.environ["MILVUS_URI"] = uri

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return stop_milvus


def percentile(values: Sequence[float], q: float) -> float:
    from evaluation.metrics import percentile as nearest_rank

    return round(nearest_rank(values, q), 3)


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


class PeakRss:
    """Samples the process's resident memory; peak minus start = what a phase added."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.start_mb = self.peak_mb = _rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, _rss_mb())
            time.sleep(self.interval)

    @contextmanager
    def measure(self) -> Iterator["PeakRss"]:
        self.start_mb = self.peak_mb = _rss_mb()
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()
            self.peak_mb = max(self.peak_mb, _rss_mb())

    @property
    def added_mb(self) -> float:
        return round(self.peak_mb - self.start_mb, 1)


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def write_results(name: str, payload: dict, *, path: Path | None = None) -> Path:
    """bench-results/<name>.json, or `path` (a smoke run must not replace the real figures)."""
    path = path or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": name,
        "machine": {"python": platform.python_version(), "cpu_count": os.cpu_count(), "platform": platform.platform()},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **payload,
    }
    path.write_text(json.dumps(payload, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(row, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))


# --- synthetic corpora (bench-retrieval, bench-chat) ----------------------------------------------

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


# Synthetic corpora of up to 100k chunks are embedded with the lexical hashing embedder: e5 would
# take hours on 2 cores, and these benchmarks measure the index and the service, not the model.
SYNTHETIC_EMBEDDING_MODEL = "local-hash-lexical-v1"


def build_corpus(size: int, *, chunks_per_document: int = 100, seed: int = 7,
                 embedding_model: str = SYNTHETIC_EMBEDDING_MODEL):
    """A published KB with `size` chunks: rows in the database, vectors in Milvus."""
    import numpy as np

    from knowledge.catalog import readiness
    from knowledge.catalog import services as catalog_services
    from knowledge.models import Chunk, Document, DocumentStatus
    from knowledge.vectors import store_for
    from engines.ports import ChunkRecord
    from engines.providers import get_embedder

    rng = random.Random(seed + size)
    kb = catalog_services.create_knowledge_base(slug=f"bench-{size}", name=f"bench {size}", actor=None,
                                        embedding_model=embedding_model)
    draft = catalog_services.create_draft_version(kb=kb, actor=None)
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
    store = store_for(kb)
    started = time.perf_counter()
    for start in range(0, size, 2000):
        store.upsert_chunks([
            ChunkRecord(chunk_id=c.pk, kb_id=kb.pk, document_id=c.document_id, content=c.content,
                        content_type="text", vector=vectors[start + j].tolist())
            for j, c in enumerate(chunks[start : start + 2000])
        ])
    upsert_seconds = time.perf_counter() - started
    readiness.mark_version_ready(version=draft)
    catalog_services.activate_version(version=draft, actor=None, reason="benchmark")
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


def tear_down(*, processes=(), stop_milvus=None, postgres=None, scratch: Path | None, keep_scratch: bool) -> None:
    """The end of a benchmark with servers: stop them, drop the scratch database, remove the
    scratch directory. Ctrl-C and SIGTERM are ignored meanwhile, so a second one cannot leave
    half of it behind."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        for process in processes:
            if process is not None:
                process.stop()
        if stop_milvus is not None:
            stop_milvus()
        if postgres is not None:
            postgres.drop()
        if scratch is not None and not keep_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        elif scratch is not None:
            print(f"scratch kept: {scratch}")
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
