"""manage.py evaluate_retrieval (--dataset DIR | --eval-set NAME) --kb SLUG [--build [--embedding-model NAME]]
[--mode …] [--fusion convex|rrf …] [--rerank] [--ablation] [--k 5] [--limit N] [--output FILE]
[--filter '{"field": "部门", "op": "eq", "value": "人力资源部"}' …]

Every configuration is stored as an evaluation run with a row per question (admin: 评测运行).
A --dataset is imported as the evaluation set of the same name (idempotently) first."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from knowledge.catalog import services as catalog_services
from knowledge.models import KnowledgeBase, Visibility
from ragsite.errors import DomainError
from retrieval.contracts import RetrievalError

from ...datasets import DatasetError, load_dataset
from ...importers import read_shared_dataset
from ...models import EvalSet
from ...progress import terminal_progress
from ...runner import (
    ABLATION,
    build_knowledge_base,
    evaluate_bm25_baseline,
    evaluate_mode,
    retrieval_cases,
    run_label,
    unavailable,
)
from ...selectors import eval_set_named
from ...services import import_eval_set
from ._filters import filters_option


class Command(BaseCommand):
    help = "评测检索质量：Recall@k、Hit@k、MRR@10、nDCG@10 与延迟，并与同一次运行中的 BM25 基线对比。"

    def add_arguments(self, parser):
        parser.add_argument("--dataset", help="folder with corpus.jsonl, queries.jsonl, qrels.jsonl")
        parser.add_argument("--eval-set", help="a stored evaluation set (name); with --dataset: the name to "
                            "import it under (default: the folder's name)")
        parser.add_argument("--kb", required=True, help="knowledge base slug")
        parser.add_argument("--build", action="store_true", help="load the corpus as documents (idempotent) and publish")
        parser.add_argument("--mode", action="append", choices=["dense", "sparse", "hybrid"],
                            help="repeatable; default: all three")
        parser.add_argument("--k", type=int, default=5)
        parser.add_argument("--limit", type=int, default=None, help="evaluate the first N queries")
        parser.add_argument("--rewrite", action="store_true", help="also evaluate with query rewrite")
        parser.add_argument("--rerank", action="store_true", help="also evaluate with rerank")
        parser.add_argument("--candidate-k", type=int, default=30)
        parser.add_argument("--fusion", action="append", choices=["convex", "rrf"],
                            help="repeatable; hybrid runs once per fusion (default: RAG_FUSION)")
        parser.add_argument("--embedding-model", help="with --build on a new knowledge base: its embedding "
                            "model (default RAG_EMBEDDING_MODEL), e.g. local-hash-lexical-v1")
        parser.add_argument("--embedding-dimension", type=int, help="for a remote --embedding-model")
        parser.add_argument("--ablation", action="store_true",
                            help="dense, sparse, hybrid, hybrid − rewrite, hybrid − rerank, hybrid + parent expansion, "
                            "hybrid + HyDE (with a generative chat model), hybrid + dynamic top-k (with a reranker) "
                            "(instead of --mode / --rewrite / --rerank)")
        parser.add_argument("--output", help="write the report as JSON to this file")
        parser.add_argument("--filter", action="append", default=[], metavar="JSON",
                            help='repeatable, all must hold: a metadata filter, e.g. '
                            '\'{"field": "file_type", "op": "in", "value": ["pdf", "docx"]}\'')

    def handle(self, *args, **options):
        if options["k"] < 1:
            raise CommandError("--k 必须 ≥ 1。")
        filters = filters_option(options["filter"])
        if not options["dataset"] and not options["eval_set"]:
            raise CommandError("请给出 --dataset（共享评测集目录）或 --eval-set（已导入的评测集名称）。")
        dataset = None
        if options["dataset"]:
            try:
                dataset = load_dataset(Path(options["dataset"]), limit=options["limit"])
            except DatasetError as exc:
                raise CommandError(str(exc)) from exc
        elif options["build"]:
            raise CommandError("--build 需要 --dataset（语料来自数据集目录）。")
        stored = self._eval_set(options, None) if dataset is None else None
        kb = KnowledgeBase.objects.filter(slug=options["kb"]).first()
        if kb is None:
            if not options["build"]:
                raise CommandError(f"知识库 {options['kb']} 不存在（加 --build 创建并导入语料）。")
            try:
                kb = catalog_services.create_knowledge_base(
                    slug=options["kb"], name=f"评测：{dataset.name}", visibility=Visibility.INTERNAL, actor=None,
                    embedding_model=options["embedding_model"], embedding_dimension=options["embedding_dimension"],
                )
            except DomainError as error:
                raise CommandError(str(error.message)) from error

        elif options["embedding_model"] and options["embedding_model"] != kb.embedding_model:
            raise CommandError(
                f"知识库 {kb.slug} 使用向量模型 {kb.embedding_model}，创建后不能更改（换一个 --kb）。"
            )

        eval_set = stored or self._eval_set(options, dataset)
        judged = len(retrieval_cases(eval_set))
        queries = min(judged, options["limit"]) if options["limit"] else judged
        report: dict = {"dataset": dataset.name if dataset else eval_set.name, "eval_set": eval_set.name,
                        "kb": kb.slug, "k": options["k"], "queries": queries,
                        "corpus": len(dataset.corpus) if dataset else None, "embedding_model": kb.embedding_model,
                        "text_analysis": kb.text_analysis}
        if options["build"]:
            build = build_knowledge_base(kb=kb, dataset=dataset)
            report["build"] = build.__dict__
            self.stdout.write(f"build: uploaded {build.uploaded}, skipped {build.skipped}, failed {build.failed}, "
                              f"duplicates {build.duplicates}, {build.seconds} s, version v{build.version}")
        kb.refresh_from_db()
        if kb.active_version_id is None:
            raise CommandError("知识库没有生效版本，无法评测（加 --build）。")

        runs = []
        for name, config in self._configurations(options):
            reason = unavailable(kb=kb, config=config)
            if reason:
                # Said in the report rather than measured under a name it does not deserve.
                runs.append({"name": name, "skipped": reason})
                continue
            try:
                run = evaluate_mode(
                    kb=kb, eval_set=eval_set, k=options["k"], candidate_k=options["candidate_k"], limit=options["limit"],
                    progress=terminal_progress(self.stderr, name), filters=filters, **config,
                )
            except (DomainError, RetrievalError) as error:
                # The run is stored as failed with the error; say which and why, not a traceback.
                raise CommandError(f"{name}: {error.message}（{error.code}）") from error
            runs.append({"name": name, **run})
        report["runs"] = runs
        if filters:
            report["filters"] = [f.as_dict() for f in filters]
        # Plain BM25 over the corpus files: only a dataset folder has them.
        report["baseline"] = evaluate_bm25_baseline(dataset=dataset, k=options["k"]) if dataset else None
        self._print(report)
        if options["output"]:
            Path(options["output"]).write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")
            self.stdout.write(f"wrote {options['output']}")

    def _configurations(self, options) -> list[tuple[str, dict]]:
        if options["ablation"]:
            fusion = (options["fusion"] or [None])[0]
            return [(name, {**config, "fusion": fusion if config["mode"] == "hybrid" else None}) for name, config in ABLATION]
        found = []
        for mode in options["mode"] or ["dense", "sparse", "hybrid"]:
            for fusion in (options["fusion"] or [None]) if mode == "hybrid" else [None]:
                base = {"mode": mode, "fusion": fusion}
                found.append((run_label(mode=mode, fusion=fusion, rewrite=False, rerank=False), base))
                if options["rewrite"]:
                    found.append((run_label(mode=mode, fusion=fusion, rewrite=True, rerank=False),
                                  {**base, "enable_rewrite": True}))
                if options["rerank"]:
                    found.append((run_label(mode=mode, fusion=fusion, rewrite=False, rerank=True),
                                  {**base, "enable_rerank": True}))
        return found

    def _eval_set(self, options, dataset) -> EvalSet:
        if dataset is None:
            eval_set = eval_set_named(name=options["eval_set"], kb_slug=options["kb"])
            if eval_set is None:
                raise CommandError(f"评测集 {options['eval_set']} 不存在（用 import_eval_set 导入，或给出 --dataset）。")
            return eval_set
        try:
            cases = read_shared_dataset(Path(options["dataset"]))
        except DomainError as error:
            raise CommandError(str(error.message)) from error
        outcome = import_eval_set(name=options["eval_set"] or dataset.name, cases=cases, source=str(options["dataset"]))
        return outcome.eval_set

    def _print(self, report: dict) -> None:
        k = report["k"]
        header = (f"{'run':<34} {'recall@'+str(k):>9} {'hit@'+str(k):>7} {'mrr@10':>7} {'ndcg@10':>8} {'p50 ms':>8} "
                  f"{'p95 ms':>8} {'calls/1k':>9} {'cost/1k':>8}")
        corpus = f"{report['corpus']} passages, " if report["corpus"] is not None else ""
        self.stdout.write(f"{report['dataset']}: {report['queries']} queries, {corpus}"
                          f"{report['embedding_model']}, {report['text_analysis']}")
        self.stdout.write(header)
        measured = [run for run in report["runs"] if "skipped" not in run]
        for run in [*report["runs"], *([report["baseline"]] if report["baseline"] else [])]:
            name = run.get("name") or run["mode"]
            if "skipped" in run:
                self.stdout.write(f"{name:<34} skipped: {run['skipped']}")
                continue
            # Fusion and notes go last, so the columns stay aligned.
            extra = " ".join(filter(None, [run.get("fusion") or "", ",".join(run.get("notes") or [])]))
            m = run["metrics"]
            usage = run.get("usage") or {}
            calls = sum((usage.get("calls_per_1000") or {}).values()) if usage else None
            self.stdout.write(
                f"{name:<34} {m[f'recall@{k}']:>9.4f} {m[f'hit@{k}']:>7.4f} {m['mrr@10']:>7.4f} {m['ndcg@10']:>8.4f} "
                f"{run['latency_ms']['p50']:>8.2f} {run['latency_ms']['p95']:>8.2f} "
                f"{calls if calls is not None else '—':>9} {usage.get('cost_per_1000', '—'):>8}"
                + (f"  run #{run['run_id']}" if run.get("run_id") else "") + (f"  {extra}" if extra else "")
            )
        stages = sorted({stage for run in measured for stage in run["latency_ms"].get("stages", {})})
        if stages:
            self.stdout.write("")
            self.stdout.write(f"{'stage p50/p95 ms':<34} " + " ".join(f"{stage[:16]:>17}" for stage in stages))
            for run in measured:
                timings = run["latency_ms"]["stages"]
                cells = [f"{timings[s]['p50']:.1f}/{timings[s]['p95']:.1f}" if s in timings else "—" for s in stages]
                self.stdout.write(f"{run.get('name', run['mode']):<34} " + " ".join(f"{c:>17}" for c in cells))

        # What the model calls of each run cost: calls and tokens per 1,000 questions, by kind.
        priced = [run for run in measured if (run.get("usage") or {}).get("calls_per_1000")]
        if priced:
            self.stdout.write("")
            self.stdout.write(f"{'model use per 1,000 questions':<34} calls / tokens / cost by kind")
            for run in priced:
                usage = run["usage"]
                costs = usage.get("cost_per_1000_by_kind") or {}
                cells = [f"{kind} {calls:g} / {usage['tokens_per_1000'].get(kind, 0)} / {costs.get(kind, 0.0):g}"
                         for kind, calls in usage["calls_per_1000"].items()]
                self.stdout.write(f"{run['name']:<34} " + "; ".join(cells))
        dynamic = [run for run in measured if run.get("dynamic_top_k")]
        for run in dynamic:
            cut = run["dynamic_top_k"]
            self.stdout.write(f"{run['name']}: kept {cut['mean_kept']} results on average "
                              f"(at most 10), cut at a cliff on {cut['cut_at_a_cliff']} of {cut['questions']} questions")
