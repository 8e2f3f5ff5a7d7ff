"""manage.py evaluate_answers (--dataset DIR | --eval-set NAME) --kb SLUG [--build] [--limit N] [--output FILE]
[--filter JSON …]

Each question through the full RAGService (routing, FAQ paths, retrieval, relevance floor,
answer, citations, confidence), stored as an answers run with a row per question."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from knowledge.models import KnowledgeBase
from ragsite.errors import DomainError
from retrieval.contracts import RetrievalError

from ...answers import evaluate_answers
from ...datasets import DatasetError, load_dataset
from ...importers import read_shared_dataset
from ...models import EvalSet
from ...progress import terminal_progress
from ...runner import build_knowledge_base
from ...selectors import eval_set_named
from ...services import import_eval_set
from ._filters import filters_option


class Command(BaseCommand):
    help = "评测回答质量：答案包含率、首行命中率、引用有效率、路由与命中类型分布、无答案问题的拒答率与置信度校准。"

    def add_arguments(self, parser):
        parser.add_argument("--dataset", help="folder in the shared layout (corpus, queries with answers, qrels)")
        parser.add_argument("--eval-set", help="a stored evaluation set (name)")
        parser.add_argument("--kb", required=True, help="knowledge base slug")
        parser.add_argument("--build", action="store_true", help="with --dataset: load the corpus and publish first")
        parser.add_argument("--limit", type=int, default=None, help="the first N questions")
        parser.add_argument("--output", help="write the report as JSON to this file")
        parser.add_argument("--filter", action="append", default=[], metavar="JSON",
                            help="repeatable, all must hold: a metadata filter every question is asked with "
                            "(as evaluate_retrieval --filter)")

    def handle(self, *args, **options):
        filters = filters_option(options["filter"])
        if not options["dataset"] and not options["eval_set"]:
            raise CommandError("请给出 --dataset（共享评测集目录）或 --eval-set（已导入的评测集名称）。")
        kb = KnowledgeBase.objects.filter(slug=options["kb"]).first()
        if kb is None:
            raise CommandError(f"知识库 {options['kb']} 不存在（先用 evaluate_retrieval --build 或 ingest 导入）。")
        try:
            if options["dataset"]:
                path = Path(options["dataset"])
                eval_set = import_eval_set(name=options["eval_set"] or path.name, cases=read_shared_dataset(path),
                                           source=str(path)).eval_set
                if options["build"]:
                    build_knowledge_base(kb=kb, dataset=load_dataset(path))
            else:
                eval_set = eval_set_named(name=options["eval_set"], kb_slug=kb.slug)
                if eval_set is None:
                    raise CommandError(f"评测集 {options['eval_set']} 不存在。")
        except (DomainError, DatasetError) as error:
            raise CommandError(str(getattr(error, "message", error))) from error
        kb.refresh_from_db()
        if kb.active_version_id is None:
            raise CommandError("知识库没有生效版本，无法评测。")
        try:
            report = evaluate_answers(kb=kb, eval_set=eval_set, limit=options["limit"], filters=filters,
                                      progress=terminal_progress(self.stderr, "answers"))
        except (DomainError, RetrievalError) as error:
            raise CommandError(f"{error.message}（{error.code}）") from error
        self._print(eval_set, report)
        if options["output"]:
            Path(options["output"]).write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")
            self.stdout.write(f"wrote {options['output']}")

    def _print(self, eval_set: EvalSet, report: dict) -> None:
        m = report["metrics"]
        self.stdout.write(f"{eval_set.name}: {m['answerable'] if 'answerable' in m else 0} answerable, "
                          f"{m.get('unanswerable', 0)} unanswerable — run #{report['run_id']}")
        for name in ("containment", "first_line", "citation_validity", "answerable_declined",
                     "insufficient_context_rate", "median_chars"):
            if name in m:
                self.stdout.write(f"  {name:<28} {m[name]:.4f}")
        self.stdout.write(f"  {'latency p50 / p95 ms':<28} {report['latency_ms']['p50']:.1f} / {report['latency_ms']['p95']:.1f}")
        self.stdout.write("  routes: " + ", ".join(f"{k} {v}" for k, v in sorted(m["routes"].items())))
        self.stdout.write("  hit types: " + ", ".join(f"{k} {v}" for k, v in sorted(m["hit_types"].items())))
        self.stdout.write(f"  {'confidence':<12} {'questions':>9} {'answerable':>10} {'accuracy':>9}")
        for row in m["calibration"]:
            self.stdout.write(f"  {row['level']:<12} {row['count']:>9} {row['answerable']:>10} {row['accuracy']:>9.2%}")
        if len(m.get("categories", {})) > 1:
            self.stdout.write(f"  {'category':<14} {'right':>9} {'first line':>11}")
            for name, row in m["categories"].items():
                self.stdout.write(f"  {name:<14} {row['right']:>4} / {row['count']:<3} {row['first_line']:>7}")
