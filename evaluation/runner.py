"""Retrieval evaluation through the same RetrievalService every other caller uses."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.core.files.base import ContentFile
from django.utils.translation import gettext as _

from engines.tokens import count_tokens
from knowledge.documents import bulk
from knowledge.documents import services as document_services
from knowledge.models import Document, DocumentStatus, KnowledgeBase, KnowledgeBaseVersion
from retrieval.contracts import MetadataFilter, RetrievalRequest
from retrieval.factory import build_retrieval_service
from retrieval.service import HYDE_PROMPT

from . import services
from .bm25 import BM25
from .datasets import Dataset
from .metrics import dedupe, percentile, summarize
from .models import EvalCase, EvalSet

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
    duplicates = 0
    for start in range(0, len(todo), UPLOAD_BATCH):
        batch = todo[start : start + UPLOAD_BATCH]
        outcomes = document_services.upload_documents(
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
        duplicates += sum(1 for o in outcomes if o.duplicate)
    pending = list(
        Document.objects.filter(knowledge_base=kb)
        .exclude(status__in=[DocumentStatus.READY, DocumentStatus.FAILED])
        .values_list("pk", flat=True)
    )
    if pending:
        bulk.process_queue_until_done(pending)
    failed = Document.objects.filter(knowledge_base=kb, status=DocumentStatus.FAILED).count()
    version = bulk.publish_when_ready(kb=kb, reason=_("评测数据集 %(name)s 导入后发布") % {"name": dataset.name})
    kb.refresh_from_db()
    return BuildReport(
        uploaded=len(todo) - duplicates, skipped=len(present), failed=failed, duplicates=duplicates,
        seconds=round(time.perf_counter() - started, 1),
        version=version.number if version else (kb.active_version.number if kb.active_version_id else None),
    )


def evaluate_mode(
    *,
    kb: KnowledgeBase,
    eval_set: EvalSet,
    mode: str,
    k: int,
    enable_rewrite: bool = False,
    enable_rerank: bool = False,
    enable_parent_expansion: bool = False,
    enable_hyde: bool = False,
    dynamic_top_k: bool = False,
    candidate_k: int = 30,
    fusion: str | None = None,
    limit: int | None = None,
    actor=None,
    progress: Callable[[int, int], None] | None = None,
    version: KnowledgeBaseVersion | None = None,
    purpose: str = "",
    filters: Sequence[MetadataFilter] = (),
) -> dict:
    """One retrieval configuration over the set's cases that name their evidence, stored as an
    `EvalRun` with a row per case; returns the report row (the run's id included). `version`:
    the version whose documents answer (a draft under the release check); default the active.
    `filters`: metadata filters every question is retrieved with (kept in the run's config).
    Whatever goes wrong after the run is recorded (a misconfigured KB, Milvus down) leaves it
    FAILED with the error, never RUNNING."""
    keys = document_keys(kb=kb)
    cases = retrieval_cases(eval_set)
    if limit is not None:
        cases = cases[:limit]
    top_k = max(k, 10)
    label = run_label(mode=mode, fusion=fusion, rewrite=enable_rewrite, rerank=enable_rerank,
                      parent_expansion=enable_parent_expansion, hyde=enable_hyde, dynamic=dynamic_top_k)
    config = {"mode": mode, "k": k, "top_k": top_k, "candidate_k": max(candidate_k, top_k), "fusion": fusion,
              "rewrite": enable_rewrite, "rerank": enable_rerank, "parent_expansion": enable_parent_expansion,
              "hyde": enable_hyde, "dynamic_top_k": dynamic_top_k,
              "purpose": purpose, "version_id": version.pk if version else None,
              **({"filters": [f.as_dict() for f in filters]} if filters else {})}
    run = services.start_run(eval_set=eval_set, label=label, knowledge_base=kb, version=version or kb.active_version,
                             config=config, actor=actor)
    try:
        service = build_retrieval_service(kb)
        outcomes, rankings, latencies, stages = [], [], [], {}
        usage = Usage()
        degradations = 0
        notes: set[str] = set()
        fusions: set[str] = set()
        # Dynamic top-k, per question it applied to: results kept, and whether a cliff cut them.
        kept: list[int] = []
        cliffs = 0
        for case in cases:
            started = time.perf_counter()
            response = service.retrieve(
                RetrievalRequest(
                    kb_id=kb.pk, question=case.question, top_k=top_k, mode=mode,
                    candidate_k=max(candidate_k, top_k), enable_query_rewrite=enable_rewrite,
                    enable_rerank=enable_rerank, enable_parent_expansion=enable_parent_expansion,
                    enable_hyde=enable_hyde, dynamic_top_k=dynamic_top_k,
                    use_cache=False, fusion=fusion, version_id=version.pk if version else None,
                    filters=tuple(filters),
                )
            )
            elapsed = (time.perf_counter() - started) * 1000
            notes.update(n for n in response.trace.notes if not n.startswith("dynamic_top_k:"))
            if response.trace.fusion:
                fusions.add(response.trace.fusion)
            for timing in response.trace.stage_timings:
                stages.setdefault(timing.stage, []).append(timing.elapsed_ms)
            if response.trace.hyde is not None:
                # The model's completion alone; its channel's timing adds embedding and search.
                stages.setdefault("hyde_generation", []).append(response.trace.hyde.elapsed_ms)
            if response.trace.dynamic_top_k is not None:
                kept.append(response.trace.dynamic_top_k.kept)
                cliffs += response.trace.dynamic_top_k.cut_index is not None
            latencies.append(elapsed)
            usage.add(service=service, kb=kb, question=case.question, response=response)
            if progress is not None:
                progress(len(latencies), len(cases))
            degradations += bool(response.trace.degradations)
            judged = result_keys(case, response.results, keys)
            # Several chunks of one document count once.
            ranked, relevant = dedupe(judged), gold_of(case)
            rankings.append((ranked, relevant))
            outcomes.append(services.CaseOutcome(
                case=case, gold=sorted(relevant), latency_ms=elapsed,
                retrieved=[
                    {"rank": rank, "key": key, "document_id": r.document_id, "chunk_id": r.chunk_id,
                     "title": r.document_title, "score": round(r.score, 4), "relevance": round(r.relevance, 3)}
                    for rank, (key, r) in enumerate(zip(judged, response.results), 1)
                ][:top_k],
                gold_rank=first_rank(ranked, relevant),
                metrics=summarize([(ranked, relevant)], k=k),
                details={"degradations": list(response.trace.degradations), **case_steps(response.trace)},
            ))
        metrics = summarize(rankings, k=k)
        latency = {
            "p50": round(percentile(latencies, 50), 2), "p95": round(percentile(latencies, 95), 2),
            "stages": {stage: {"p50": round(percentile(v, 50), 2), "p95": round(percentile(v, 95), 2)}
                       for stage, v in sorted(stages.items())},
        }
        spent = usage.per_thousand(len(cases))
        services.finish_run(run=run, outcomes=outcomes, metrics=metrics, latency_ms=latency, usage=spent)
    except BaseException as exc:
        services.fail_run(run=run, error=f"{type(exc).__name__}: {exc}")
        raise
    return {
        "run_id": run.pk,
        "mode": mode,
        "rewrite": enable_rewrite,
        "rerank": enable_rerank,
        "fusion": ", ".join(sorted(fusions)) if mode == "hybrid" else "",
        "notes": sorted(notes),
        "metrics": metrics,
        "latency_ms": latency,
        "degraded_queries": degradations,
        "usage": spent,
        **({"filters": [f.as_dict() for f in filters]} if filters else {}),
        "dynamic_top_k": {
            "questions": len(kept), "mean_kept": round(sum(kept) / len(kept), 2),
            "cut_at_a_cliff": cliffs,
        } if kept else None,
    }


def case_steps(trace) -> dict:
    """The optional steps one question ran (HyDE, dynamic top-k), as its row stores them."""
    steps = {}
    if trace.hyde is not None:
        steps["hyde"] = trace.hyde.as_dict()
    if trace.dynamic_top_k is not None:
        steps["dynamic_top_k"] = trace.dynamic_top_k.as_dict()
    return steps


@dataclass
class Usage:
    """Model calls and their tokens over a run, priced from RAG_MODEL_PRICES (per 1,000 tokens,
    in the provider's currency); local models cost nothing. Counted from each trace: a query
    embedding per dense channel, one rewrite or HyDE generation when it was called (a failed
    call costs too), one rerank call over the reranked candidates. A HyDE generation is charged
    its real prompt and, as output, one token per character of the hypothetical answer (the
    trace keeps its length, not its text; Qwen's tokenizer took 1.3–1.9 characters per token on
    the demo's Chinese, so this errs high); its embedding, the question and that answer."""

    calls: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    cost: float = 0.0
    # The same cost by kind of call: a row's HyDE spend apart from its rerank estimate, which
    # moves with the passages each configuration returns.
    costs: dict[str, float] = field(default_factory=dict)

    def add(self, *, service, kb: KnowledgeBase, question: str, response) -> None:
        trace = response.trace
        question_tokens = count_tokens(question)
        variants = {label: text for label, text in zip(("original", "rewrite"), trace.query_variants)}
        hyde = trace.hyde
        if hyde is not None:
            self._charge(hyde.model, "hyde", count_tokens(HYDE_PROMPT.format(question=question)),
                         hyde.hypothesis_chars)
        for timing in trace.stage_timings:
            if timing.stage == "channel:dense:hyde":
                chars = hyde.hypothesis_chars if hyde is not None else 0
                self._charge(kb.embedding_model, "embedding", question_tokens + chars, 0)
            elif timing.stage.startswith("channel:dense:"):
                label = timing.stage.removeprefix("channel:dense:")
                self._charge(kb.embedding_model, "embedding", count_tokens(variants.get(label, question)), 0)
            if timing.stage == "rewrite" and service.rewriter.name != "none":
                self._charge(service.rewriter.name, "rewrite", question_tokens + PROMPT_TOKENS, question_tokens)
        reranked = trace.candidate_counts.get("reranked", 0)
        if reranked and service.reranker is not None:
            passage = sum(count_tokens(r.matched_content) for r in response.results) / max(len(response.results), 1)
            self._charge(service.reranker.name, "rerank", int(reranked * (question_tokens + passage)), 0)

    def _charge(self, model: str, kind: str, tokens_in: int, tokens_out: int) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.tokens[kind] = self.tokens.get(kind, 0) + tokens_in + tokens_out
        prices = settings.RAG_MODEL_PRICES or {}
        # Remote adapters name themselves "provider:model"; price lists name the model.
        price = prices.get(model) or prices.get(model.partition(":")[2]) or {}
        cost = tokens_in / 1000 * float(price.get("input", 0.0)) + tokens_out / 1000 * float(price.get("output", 0.0))
        self.cost += cost
        self.costs[kind] = self.costs.get(kind, 0.0) + cost

    def per_thousand(self, questions: int) -> dict:
        scale = 1000 / questions if questions else 0.0
        return {
            "calls_per_1000": {kind: round(n * scale, 1) for kind, n in sorted(self.calls.items())},
            "tokens_per_1000": {kind: round(n * scale) for kind, n in sorted(self.tokens.items())},
            "cost_per_1000": round(self.cost * scale, 4),
            "cost_per_1000_by_kind": {kind: round(c * scale, 4) for kind, c in sorted(self.costs.items())},
        }


# Rough size of a rewrite prompt's fixed part, in tokens.
PROMPT_TOKENS = 120


# dense, sparse, hybrid with every stage, then hybrid without one stage at a time, and with
# parent expansion (Small2Big does not change chunk ranks; measured for its cost).
ABLATION = (
    ("dense", {"mode": "dense"}),
    ("sparse", {"mode": "sparse"}),
    ("hybrid", {"mode": "hybrid", "enable_rewrite": True, "enable_rerank": True}),
    ("hybrid − rewrite", {"mode": "hybrid", "enable_rewrite": False, "enable_rerank": True}),
    ("hybrid − rerank", {"mode": "hybrid", "enable_rewrite": True, "enable_rerank": False}),
    ("hybrid + parent expansion", {"mode": "hybrid", "enable_rewrite": True, "enable_rerank": True,
                                   "enable_parent_expansion": True}),
    # One more dense list from a hypothetical answer (needs a generative chat model).
    ("hybrid + HyDE", {"mode": "hybrid", "enable_rewrite": True, "enable_rerank": True, "enable_hyde": True}),
    # The reranked list cut at its first score cliff (at most 10) instead of the fixed top-k.
    ("hybrid + dynamic top-k", {"mode": "hybrid", "enable_rewrite": True, "enable_rerank": True,
                                "dynamic_top_k": True}),
)


def unavailable(*, kb: KnowledgeBase, config: dict) -> str:
    """Why this deployment cannot measure `config` on `kb` ("" when it can): a row that would
    only repeat another one under a different name is skipped and says why."""
    if not (config.get("enable_hyde") or config.get("dynamic_top_k")):
        return ""
    service = build_retrieval_service(kb)
    if config.get("enable_hyde") and service.hyde_model is None:
        return "no generative chat model (RAG_PROVIDER=local, or RAG_CHAT_MODEL unset): HyDE cannot run"
    if config.get("dynamic_top_k") and service.reranker is None:
        return "no reranker (RAG_PROVIDER=local without RAG_RERANK_MODEL=local-lexical): dynamic top-k cuts rerank scores"
    return ""


def retrieval_cases(eval_set: EvalSet) -> list[EvalCase]:
    """Cases retrieval can be judged on: answerable, with gold documents or chunks."""
    return [
        case for case in eval_set.cases.order_by("ordinal", "id")
        if case.answerable and (case.expected_documents or case.expected_chunks)
    ]


def run_label(*, mode: str, fusion: str | None, rewrite: bool, rerank: bool, parent_expansion: bool = False,
              hyde: bool = False, dynamic: bool = False) -> str:
    return (mode + (f"({fusion})" if fusion else "") + ("+rewrite" if rewrite else "") + ("+rerank" if rerank else "")
            + ("+parents" if parent_expansion else "") + ("+hyde" if hyde else "") + ("+dynamic" if dynamic else ""))


def document_keys(*, kb: KnowledgeBase) -> dict[int, tuple[str, ...]]:
    """The names a case may use for each document: external id (corpus id), title, file name."""
    return {
        pk: tuple(key for key in (external_id, title, original_name) if key)
        for pk, external_id, title, original_name in Document.objects.filter(knowledge_base=kb).values_list(
            "pk", "external_id", "title", "original_name"
        )
    }


def result_keys(case: EvalCase, results, keys: dict[int, tuple[str, ...]]) -> list[str]:
    """Each result as the unit the case is judged in: its chunk when the case names chunks,
    else its document under the first of its names the case expects (or its id)."""
    if case.expected_chunks:
        return [f"chunk:{r.chunk_id}" for r in results]
    expected = set(case.expected_documents)
    found = []
    for r in results:
        names = keys.get(r.document_id, ())
        found.append(next((name for name in names if name in expected), f"document:{r.document_id}"))
    return found


def gold_of(case: EvalCase) -> frozenset[str]:
    """The case's gold in the unit `result_keys` names results in."""
    if case.expected_chunks:
        return frozenset(f"chunk:{c}" for c in case.expected_chunks)
    return frozenset(case.expected_documents)


def first_rank(ranked: list[str], relevant: frozenset[str]) -> int | None:
    return next((rank for rank, key in enumerate(ranked, 1) if key in relevant), None)


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
