"""make bench-ingest: ingestion throughput and memory, split by stage, local provider.

Corpora: the bundled demo knowledge base (every format, OCR included) and
../shared/eval/cmrc2018_dev_chunks/corpus.jsonl loaded as one document per passage. Each document
goes through the real pipeline (storage → parse → chunk → embed → database → Milvus). The same
chunk texts are then embedded and inserted with raw pymilvus calls in the same run, as the
baseline the pipeline's overhead is measured against.

The CLI path (`--cli-files N`, default 1500) is the one users take: N one-passage files in a
folder, `manage.py ingest DIR --kb … --create --activate` in a subprocess (upload, queue, worker,
readiness, publish), with the hashing embedder, against a raw pymilvus insert of the same texts.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from .common import PeakRss, ROOT, print_table, setup_django, write_results

CMRC_CHUNKS = ROOT.parent / "shared" / "eval" / "cmrc2018_dev_chunks"
STAGES = ["upload", "parse", "chunk", "assets", "embed", "store", "upsert"]


def run_pipeline(kb, files: list[tuple[str, bytes]], *, titles=None, external_ids=None) -> dict:
    from django.core.files.base import ContentFile

    from knowledge.documents import services as document_services
    from knowledge.documents.ingestion.tasks import ingest_document
    from knowledge.models import Chunk

    stage_seconds: dict[str, float] = defaultdict(float)
    document_ids: list[int] = []
    monitor = PeakRss()
    started = time.perf_counter()
    with monitor.measure():
        upload_started = time.perf_counter()
        for start in range(0, len(files), 50):
            batch = files[start : start + 50]
            outcomes = document_services.upload_documents(
                kb=kb,
                files=[ContentFile(data, name=name) for name, data in batch],
                actor=None,
                titles=titles[start : start + 50] if titles else None,
                external_ids=external_ids[start : start + 50] if external_ids else None,
            )
            document_ids += [o.document.pk for o in outcomes]
        stage_seconds["upload"] = time.perf_counter() - upload_started
        failed = 0
        for document_id in document_ids:
            report = ingest_document(document_id=document_id)
            failed += report.status == "failed"
            for stage, seconds in report.seconds.items():
                stage_seconds[stage] += seconds
    elapsed = time.perf_counter() - started
    chunks = Chunk.objects.filter(document_id__in=document_ids).count()
    return {
        "documents": len(document_ids),
        "failed": failed,
        "chunks": chunks,
        "seconds": round(elapsed, 2),
        "chunks_per_second": round(chunks / elapsed, 1) if elapsed else 0.0,
        "stage_seconds": {k: round(v, 3) for k, v in sorted(stage_seconds.items())},
        "peak_rss_added_mb": monitor.added_mb,
        "peak_rss_mb": round(monitor.peak_mb, 1),
    }


def cli_path(limit: int, *, embedding_model: str = "local-hash-lexical-v1", slug: str = "bench-cli",
             repeat: int = 1) -> dict:
    """`manage.py ingest` on `limit` one-passage files, as a user runs it (`repeat` > 1 writes
    each passage that many times with a distinct first line, for a large import)."""
    import subprocess
    import sys
    import tempfile

    from evaluation.datasets import load_dataset
    from evaluation.runner import corpus_document_text
    from knowledge.models import Chunk, Document, KnowledgeBase

    folder = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    corpus = load_dataset(CMRC_CHUNKS).corpus
    written = 0
    for copy in range(repeat):
        for entry in corpus:
            if written >= limit:
                break
            text = corpus_document_text(entry.title, entry.text)
            if repeat > 1:
                text = f"第 {copy + 1} 份 · {entry.title}\n{text}"
            (folder / f"{written:06d}.txt").write_text(text, encoding="utf-8")
            written += 1
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "ingest", str(folder), "--kb", slug, "--create", "--activate",
         "--embedding-model", embedding_model],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    memory = TreeRss(process.pid)
    with memory.sampling():
        _out, stderr = process.communicate()
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"manage.py ingest failed:\n{stderr[-3000:]}")
    kb = KnowledgeBase.objects.get(slug=slug)
    ids = list(Document.objects.filter(knowledge_base=kb).values_list("pk", flat=True))
    chunks = Chunk.objects.filter(knowledge_base=kb).count()
    stage_seconds: dict[str, float] = defaultdict(float)
    for metadata in Document.objects.filter(knowledge_base=kb).values_list("metadata", flat=True).iterator():
        for stage, value in (metadata.get("stage_seconds") or {}).items():
            stage_seconds[stage] += value
    throughput = chunks / seconds if seconds else 0.0
    result = {
        "embedding_model": embedding_model,
        "documents": len(ids), "chunks": chunks, "seconds": round(seconds, 2),
        "chunks_per_second": round(throughput, 1),
        "stage_seconds": {k: round(v, 2) for k, v in sorted(stage_seconds.items())},
        "peak_rss_mb": memory.peak_mb,
        "rss_mb_by_tenth": memory.by_tenth(),
    }
    if repeat == 1:
        baseline = raw_baseline(kb, ids)
        result["raw_baseline"] = baseline
        result["cli_vs_raw_throughput"] = (
            round(throughput / baseline["chunks_per_second"], 3) if baseline["chunks_per_second"] else None
        )
        encode = baseline["chunks"] / baseline["embed_seconds"] if baseline["embed_seconds"] else 0.0
        result["bare_encode_chunks_per_second"] = round(encode, 1)
        result["cli_vs_bare_encode"] = round(throughput / encode, 3) if encode else None
    return result


def sheet_path(rows: int, *, slug: str = "bench-sheet", sample_seconds: float = 10.0) -> dict:
    """`manage.py ingest` of one spreadsheet of `rows` product rows with the default (e5)
    embedder, its progress read from the database every `sample_seconds` as the admin shows it."""
    import random
    import subprocess
    import sys
    import tempfile

    import openpyxl

    from knowledge.models import Chunk, Document, KnowledgeBase

    rng = random.Random(5)
    folder = Path(tempfile.mkdtemp(prefix="bench-sheet-"))
    path = folder / "产品目录.xlsx"
    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet("产品目录")
    sheet.append(["编号", "名称", "型号", "单价（元）", "库存", "保修", "说明"])
    kinds = ["路由器", "交换机", "摄像头", "网关", "存储柜", "打印机", "投影仪", "门禁"]
    for index in range(rows):
        kind = rng.choice(kinds)
        sheet.append([f"P{index:06d}", f"星河{kind}{index % 97}", f"XH-{rng.randint(100, 999)}{rng.choice('ABCDE')}",
                      rng.randint(99, 9999), rng.randint(0, 500), f"{rng.randint(1, 3)} 年",
                      f"适用于{rng.choice(['办公室', '仓库', '门店', '会议室'])}，{rng.choice(['支持', '不支持'])}远程管理"])
    book.save(path)
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "ingest", str(path), "--kb", slug, "--create", "--activate"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    samples: list[tuple[float, str, int, int]] = []
    while process.poll() is None:
        time.sleep(sample_seconds)
        row = Document.objects.filter(knowledge_base__slug=slug).values_list(
            "status", "embedded_chunks", "chunks_to_embed").first()
        if row:
            samples.append((round(time.perf_counter() - started, 1), *row))
    stderr = process.stderr.read()
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"manage.py ingest failed:\n{stderr[-3000:]}")
    kb = KnowledgeBase.objects.get(slug=slug)
    document = Document.objects.get(knowledge_base=kb)
    chunks = Chunk.objects.filter(knowledge_base=kb).count()
    return {
        "rows": rows, "file_mb": round(path.stat().st_size / 1e6, 1), "status": document.status,
        "chunks": chunks, "seconds": round(seconds, 1), "chunks_per_second": round(chunks / seconds, 1),
        "stage_seconds": {k: round(v, 1) for k, v in sorted((document.metadata.get("stage_seconds") or {}).items())},
        "progress": samples,
    }


class TreeRss:
    """Resident memory of a process and its children (the ingest command and its helper
    workers), sampled every half second from /proc."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid = pid
        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()

    @property
    def peak_mb(self) -> float:
        return round(max(self.samples, default=0.0), 1)

    def by_tenth(self) -> list[float]:
        """The largest sample in each tenth of the run: flat when memory does not grow."""
        if not self.samples:
            return []
        size = max(len(self.samples) // 10, 1)
        return [round(max(self.samples[i : i + size]), 1) for i in range(0, len(self.samples), size)][:10]

    @contextmanager
    def sampling(self):
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            total = sum(_rss_kb(pid) for pid in self._tree())
            if total:
                self.samples.append(total / 1024)

    def _tree(self) -> list[int]:
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                parents[int(entry.name)] = int(fields[1])
        tree, frontier = [self.pid], [self.pid]
        while frontier:
            children = [pid for pid, parent in parents.items() if parent in frontier]
            tree.extend(children)
            frontier = children
        return tree


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def raw_baseline(kb, document_ids_filter) -> dict:
    """Embed the same chunk texts and insert them with plain pymilvus into a scratch collection."""
    from django.conf import settings
    from pymilvus import DataType, MilvusClient

    from knowledge.models import Chunk
    from engines.providers import get_embedder

    texts = list(Chunk.objects.filter(document_id__in=document_ids_filter).values_list("content", flat=True))
    embedder = get_embedder(kb.embedding_model, kb.embedding_dimension)
    started = time.perf_counter()
    vectors = []
    for start in range(0, len(texts), 64):
        vectors += embedder.embed_documents(texts[start : start + 64])
    embed_seconds = time.perf_counter() - started

    client = MilvusClient(uri=settings.MILVUS_URI, dedicated=True)  # not the idle shared channel
    name = f"bench_raw_{int(time.time())}"
    schema = client.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=kb.embedding_dimension)
    index = client.prepare_index_params()
    index.add_index("vector", index_type="AUTOINDEX", metric_type="COSINE")
    client.create_collection(name, schema=schema, index_params=index)
    started = time.perf_counter()
    for start in range(0, len(vectors), 500):
        client.insert(name, [{"id": start + i, "vector": v} for i, v in enumerate(vectors[start : start + 500])])
    insert_seconds = time.perf_counter() - started
    client.drop_collection(name)
    client.close()
    total = embed_seconds + insert_seconds
    return {
        "chunks": len(texts),
        "embed_seconds": round(embed_seconds, 3),
        "insert_seconds": round(insert_seconds, 3),
        "chunks_per_second": round(len(texts) / total, 1) if total else 0.0,
    }


def demo_files(out_dir: Path) -> list[tuple[str, bytes]]:
    from demo.build import build_demo_corpus

    return [(p.name, p.read_bytes()) for p in build_demo_corpus(out_dir)]


def cmrc_files(limit: int | None, directory: Path = CMRC_CHUNKS) -> tuple[list[tuple[str, bytes]], list[str], list[str]]:
    from evaluation.datasets import load_dataset
    from evaluation.runner import corpus_document_text

    dataset = load_dataset(directory)
    corpus = dataset.corpus[:limit] if limit else dataset.corpus
    files = [(f"{n}.txt", corpus_document_text(e.title, e.text).encode()) for n, e in enumerate(corpus)]
    return files, [e.title for e in corpus], [e.id for e in corpus]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cmrc-limit", type=int, default=None, help="load only the first N passages")
    parser.add_argument("--cmrc-dir", type=Path, default=CMRC_CHUNKS, help="folder with the corpus.jsonl to load")
    parser.add_argument("--cli-files", type=int, default=1500,
                        help="one-passage files for the manage.py ingest path (0: skip)")
    parser.add_argument("--cli-neural-files", type=int, default=300,
                        help="one-passage files for the manage.py ingest path with local-e5-small-v1 (0: skip)")
    parser.add_argument("--large-chunks", type=int, default=0,
                        help="also import this many one-passage files (e.g. 100000) with the hashing "
                        "embedder and report time and memory over the run")
    parser.add_argument("--skip-in-process", action="store_true", help="only the manage.py ingest paths")
    parser.add_argument("--sheet-rows", type=int, default=0,
                        help="also import one spreadsheet of this many rows (e.g. 100000) with the default "
                        "e5 embedder and report its time and its progress as the admin shows it")
    parser.add_argument("--embedding-model", default=None,
                        help="embedder of the knowledge bases (default RAG_EMBEDDING_MODEL: local-e5-small-v1)")
    args = parser.parse_args()
    stop = setup_django()
    try:
        import tempfile

        from knowledge.catalog import services as catalog_services
        from knowledge.models import Document

        results = {}
        for name, loader in () if args.skip_in_process else (
            ("demo", lambda: (demo_files(Path(tempfile.mkdtemp())), None, None)),
            ("cmrc2018_dev_chunks", lambda: cmrc_files(args.cmrc_limit, args.cmrc_dir)),
        ):
            files, titles, external_ids = loader()
            kb = catalog_services.create_knowledge_base(slug=f"bench-{name.replace('_', '-')}", name=name, actor=None,
                                                embedding_model=args.embedding_model)
            pipeline = run_pipeline(kb, files, titles=titles, external_ids=external_ids)
            ids = list(Document.objects.filter(knowledge_base=kb).values_list("pk", flat=True))
            baseline = raw_baseline(kb, ids)
            pipeline["raw_baseline"] = baseline
            pipeline["pipeline_vs_raw_throughput"] = (
                round(pipeline["chunks_per_second"] / baseline["chunks_per_second"], 3)
                if baseline["chunks_per_second"] else None
            )
            results[name] = pipeline

        stages = STAGES
        rows = []
        for name, r in results.items():
            rows.append([name, r["documents"], r["chunks"], r["seconds"], r["chunks_per_second"],
                         *(r["stage_seconds"].get(s, 0.0) for s in stages), r["peak_rss_added_mb"],
                         r["raw_baseline"]["chunks_per_second"], r["pipeline_vs_raw_throughput"]])
        print_table(["corpus", "docs", "chunks", "s", "chunks/s", *[f"{s} s" for s in stages], "+RSS MB",
                     "raw chunks/s", "pipeline/raw"], rows)
        cli = []
        if args.cli_files:
            cli.append(("manage.py ingest (hashing)", cli_path(args.cli_files)))
        if args.cli_neural_files:
            cli.append(("manage.py ingest (e5)", cli_path(
                args.cli_neural_files, embedding_model="local-e5-small-v1", slug="bench-cli-e5")))
        if cli:
            print()
            print_table(["path", "docs", "chunks", "s", "chunks/s", "peak RSS MB", "raw chunks/s", "cli/raw",
                         "bare encode/s", "cli/encode"], [[
                name, r["documents"], r["chunks"], r["seconds"], r["chunks_per_second"], r["peak_rss_mb"],
                r["raw_baseline"]["chunks_per_second"], r["cli_vs_raw_throughput"],
                r["bare_encode_chunks_per_second"], r["cli_vs_bare_encode"],
            ] for name, r in cli])
            print_table(["path", *STAGES], [[name, *(r["stage_seconds"].get(s, 0.0) for s in STAGES)] for name, r in cli])
        large = None
        if args.large_chunks:
            large = cli_path(args.large_chunks, slug="bench-large", repeat=-(-args.large_chunks // 2808))
            print()
            print_table(["large import", "docs", "chunks", "s", "chunks/s", "peak RSS MB", "RSS MB by tenth of the run"], [[
                "manage.py ingest (hashing)", large["documents"], large["chunks"], large["seconds"],
                large["chunks_per_second"], large["peak_rss_mb"], " ".join(map(str, large["rss_mb_by_tenth"])),
            ]])
        sheet = None
        if args.sheet_rows:
            sheet = sheet_path(args.sheet_rows)
            print()
            print_table(["spreadsheet", "rows", "MB", "status", "chunks", "s", "chunks/s", "stages s"], [[
                "manage.py ingest (e5)", sheet["rows"], sheet["file_mb"], sheet["status"], sheet["chunks"],
                sheet["seconds"], sheet["chunks_per_second"],
                " ".join(f"{k}={v}" for k, v in sheet["stage_seconds"].items()),
            ]])
            print("progress (s, status, embedded, total):", " ".join(
                f"{t}:{status}:{done}/{total}" for t, status, done, total in sheet["progress"]))
        path = write_results("ingest", {"provider": "local", "corpora": results, "cli": dict(cli), "large": large,
                                        "sheet": sheet})
        print(f"\nwrote {path}")
    finally:
        stop()


if __name__ == "__main__":
    main()
