"""Retrieval evaluation through the same RetrievalService every other caller uses."""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.core.files.base import ContentFile

from knowledge import bulk, services
from knowledge.models import Document, DocumentStatus, KnowledgeBase
from retrieval.contracts import RetrievalRequest
from retrieval.factory import build_retrieval_service

from .bm25 import BM25
from .datasets import Dataset
from .metrics import dedupe, percentile, summarize

UPLOAD_BATCH = 50


@dataclass(frozen=True)
class BuildReport:
    uploaded: int
    skipped: int
    failed: int
    duplicates: int
    seconds: float
    version: int | None


def corpus_document_text(title: str, text: str) -> str:
    return f"{title}\n\n{text}" if title else text


def build_knowledge_base(*, kb: KnowledgeBase, dataset: Dataset) -> BuildReport:
    """Load the corpus as documents (external id = corpus id), idempotently, and publish."""
    started = time.perf_counter()
    present = set(
        Document.objects.filter(knowledge_base=kb).exclude(external_id="").values_list("external_id", flat=True)
    )
    todo = [entry for entry in dataset.corpus if entry.id not in present]
    document_ids: list[int] = []
    duplicates = 0
    for start in range(0, len(todo), UPLOAD_BATCH):
        batch = todo[start : start + UPLOAD_BATCH]
        outcomes = services.upload_documents(
            kb=kb,
            files=[
                ContentFile(corpus_document_text(e.title, e.text).encode("utf-8"), name=f"{index + start}.txt")
                for index, e in enumerate(batch)
            ],
            actor=None,
            source_tag=f"eval:{dataset.name}",
            external_ids=[e.id for e in batch],
            titles=[e.title or e.id for e in batch],
        )
        document_ids.extend(o.document.pk for o in outcomes)
        duplicates += sum(1 for o in outcomes if o.duplicate)
    pending = list(
        Document.objects.filter(knowledge_base=kb)
        .exclude(status__in=[DocumentStatus.READY, DocumentStatus.FAILED])
        .values_list("pk", flat=True)
    )
    if pending:
        bulk.process_queue_until_done(pending)
    failed = Document.objects.filter(knowledge_base=kb, status=DocumentStatus.FAILED).count()
    version = bulk.publish_when_ready(kb=kb, reason=f"evaluate_retrieval --build {dataset.name}")
    kb.refresh_from_db()
    return BuildReport(
        uploaded=len(todo) - duplicates, skipped=len(present), failed=failed, duplicates=duplicates,
        seconds=round(time.perf_counter() - started, 1),
        version=version.number if version else (kb.active_version.number if kb.active_version_id else None),
    )


def evaluate_mode(
    *,
    kb: KnowledgeBase,
    dataset: Dataset,
    mode: str,
    k: int,
    enable_rewrite: bool = False,
    enable_rerank: bool = False,
    enable_parent_expansion: bool = False,
    candidate_k: int = 30,
    fusion: str | None = None,
) -> dict:
    service = build_retrieval_service(kb)
    external = dict(Document.objects.filter(knowledge_base=kb).values_list("pk", "external_id"))
    top_k = max(k, 10)
    rankings, latencies = [], []
    degradations = 0
    notes: set[str] = set()
    fusions: set[str] = set()
    for query in dataset.queries:
        started = time.perf_counter()
        response = service.retrieve(
            RetrievalRequest(
                kb_id=kb.pk, question=query.question, top_k=top_k, mode=mode,
                candidate_k=max(candidate_k, top_k), enable_query_rewrite=enable_rewrite,
                enable_rerank=enable_rerank, enable_parent_expansion=enable_parent_expansion,
                use_cache=False, fusion=fusion,
            )
        )
        notes.update(n for n in response.trace.notes if not n.startswith("dynamic_top_k:"))
        if response.trace.fusion:
            fusions.add(response.trace.fusion)
        latencies.append((time.perf_counter() - started) * 1000)
        degradations += bool(response.trace.degradations)
        ranked = dedupe([external.get(r.document_id, "") for r in response.results])
        rankings.append((ranked, dataset.qrels[query.id]))
    return {
        "mode": mode,
        "rewrite": enable_rewrite,
        "rerank": enable_rerank,
        "fusion": ", ".join(sorted(fusions)) if mode == "hybrid" else "",
        "notes": sorted(notes),
        "metrics": summarize(rankings, k=k),
        "latency_ms": {"p50": round(percentile(latencies, 50), 2), "p95": round(percentile(latencies, 95), 2)},
        "degraded_queries": degradations,
    }


def evaluate_bm25_baseline(*, dataset: Dataset, k: int) -> dict:
    started = time.perf_counter()
    index = BM25([(e.id, corpus_document_text(e.title, e.text)) for e in dataset.corpus])
    build_seconds = time.perf_counter() - started
    rankings, latencies = [], []
    for query in dataset.queries:
        started = time.perf_counter()
        ranked = index.search(query.question, k=max(k, 10))
        latencies.append((time.perf_counter() - started) * 1000)
        rankings.append((ranked, dataset.qrels[query.id]))
    return {
        "mode": "bm25-baseline",
        "metrics": summarize(rankings, k=k),
        "latency_ms": {"p50": round(percentile(latencies, 50), 2), "p95": round(percentile(latencies, 95), 2)},
        "index_seconds": round(build_seconds, 2),
    }
