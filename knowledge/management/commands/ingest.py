"""manage.py ingest PATH... --kb SLUG [--create [--embedding-model NAME]] [--activate] [--wait]"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from ragsite.errors import DomainError

from knowledge.documents import bulk
from knowledge.catalog import services as catalog_services
from knowledge.models import Document, DocumentStatus, KnowledgeBase


class Command(BaseCommand):
    help = "把文件或目录导入知识库的草稿版本（可等待处理完成并发布）。"

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", help="files or directories")
        parser.add_argument("--kb", required=True, help="knowledge base slug")
        parser.add_argument("--create", action="store_true", help="create the knowledge base if it does not exist")
        parser.add_argument("--name", default="", help="name for a knowledge base created with --create")
        parser.add_argument("--visibility", default="internal", choices=["public", "internal", "restricted"])
        parser.add_argument("--wait", action="store_true", help="process the queue in this process until these documents end")
        parser.add_argument("--activate", action="store_true", help="publish the version when all documents are READY (implies --wait)")
        parser.add_argument("--embedding-model", default=None,
                            help="with --create: the new knowledge base's embedding model (default "
                            "RAG_EMBEDDING_MODEL; local-hash-lexical-v1 is the fast lexical one)")
        parser.add_argument("--workers", type=int, default=None,
                            help="with --wait: processes working the queue, this one included (default: one "
                            "per core, at most 4; 1 with an embedded Milvus Lite file or a local neural "
                            "embedder, which uses every core itself)")
        parser.add_argument("--source-tag", default="")
        parser.add_argument("--timeout", type=float, default=3600.0)

    def handle(self, *args, **options):
        kb = self._knowledge_base(options)
        try:
            paths = bulk.expand_paths(options["paths"])
        except FileNotFoundError as exc:
            raise CommandError(f"找不到路径：{exc}") from exc
        if not paths:
            raise CommandError("没有找到可导入的文件。")

        started = time.monotonic()
        wait = options["wait"] or options["activate"]
        workers = options["workers"] if options["workers"] is not None else bulk.default_workers(kb=kb)
        if workers < 1:
            raise CommandError("--workers 至少为 1。")
        # Helpers start with the upload: their start-up overlaps it instead of the processing.
        with bulk.helper_workers(workers - 1 if wait else 0):
            outcomes = bulk.upload_all(kb=kb, paths=paths, source_tag=options["source_tag"])
            ids = [o.document_id for o in outcomes if o.document_id]
            if wait and ids:
                try:
                    bulk.process_queue_until_done(ids, timeout=options["timeout"])
                except TimeoutError as exc:
                    raise CommandError(str(exc)) from exc
        failed = self._print_table(outcomes, time.monotonic() - started)

        if options["activate"]:
            if failed:
                self.stderr.write(self.style.WARNING("有文件失败，未发布版本。"))
            else:
                version = bulk.publish_when_ready(kb=kb, reason="manage.py ingest --activate")
                if version is None:
                    self.stderr.write(self.style.WARNING("没有可发布的就绪版本。"))
                else:
                    self.stdout.write(self.style.SUCCESS(f"已发布 {kb.slug} v{version.number}。"))
        if failed:
            raise CommandError(f"{failed} 个文件失败。")

    def _knowledge_base(self, options) -> KnowledgeBase:
        kb = KnowledgeBase.objects.filter(slug=options["kb"]).first()
        if kb is not None:
            if options["embedding_model"] and options["embedding_model"] != kb.embedding_model:
                raise CommandError(
                    f"知识库 {kb.slug} 使用向量模型 {kb.embedding_model}，创建后不能更改。"
                )
            return kb
        if not options["create"]:
            raise CommandError(f"知识库 {options['kb']} 不存在（加 --create 自动创建）。")
        try:
            return catalog_services.create_knowledge_base(
                slug=options["kb"], name=options["name"] or options["kb"],
                visibility=options["visibility"], actor=None, embedding_model=options["embedding_model"],
            )
        except DomainError as error:
            raise CommandError(str(error.message)) from error

    def _final_rows(self, outcomes, *, per_query: int = 2000):
        """The outcomes with each document's final state, read a slice at a time (an import of
        100,000 files must not hold 100,000 documents in memory at once)."""
        for start in range(0, len(outcomes), per_query):
            part = outcomes[start : start + per_query]
            documents = {
                pk: (status, chunks, (metadata or {}).get("stage_seconds") or {}, code, message)
                for pk, status, chunks, metadata, code, message in Document.objects.filter(
                    pk__in=[o.document_id for o in part if o.document_id]
                ).values_list("pk", "status", "chunk_count", "metadata", "error_code", "error_message")
            }
            for outcome in part:
                found = documents.get(outcome.document_id)
                if found is None:
                    yield outcome
                    continue
                status, chunks, stage_seconds, code, message = found
                error = f"{code}: {message}" if status == DocumentStatus.FAILED else ""
                yield bulk.FileOutcome(outcome.path, outcome.document_id, status, chunks, sum(stage_seconds.values()),
                                       error, outcome.duplicate)

    def _print_table(self, outcomes, elapsed: float) -> int:
        """Prints one line per file; returns how many failed or were refused."""
        width = max([len(str(o.path)) for o in outcomes] + [4])
        self.stdout.write(f"{'file'.ljust(width)}  {'status':<9} {'chunks':>6} {'seconds':>8}  note")
        failed = 0
        for row in self._final_rows(outcomes):
            note = row.error or ("duplicate" if row.duplicate else "")
            bad = row.status in ("failed", "refused")
            failed += bad
            style = self.style.ERROR if bad else (lambda s: s)
            self.stdout.write(style(f"{str(row.path).ljust(width)}  {row.status:<9} {row.chunks:>6} {row.seconds:>8.2f}  {note}"))
        self.stdout.write(f"{len(outcomes)} files in {elapsed:.1f} s")
        return failed
