"""manage.py ingest PATH... --kb SLUG [--create [--embedding-model NAME]] [--activate] [--wait]"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from ragsite.errors import DomainError

from ... import bulk, services
from ...models import Document, DocumentStatus, KnowledgeBase


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
        rows = self._final_rows(outcomes)
        self._print_table(rows, time.monotonic() - started)

        failed = [r for r in rows if r.status in ("failed", "refused")]
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
            raise CommandError(f"{len(failed)} 个文件失败。")

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
            return services.create_knowledge_base(
                slug=options["kb"], name=options["name"] or options["kb"],
                visibility=options["visibility"], actor=None, embedding_model=options["embedding_model"],
            )
        except DomainError as error:
            raise CommandError(str(error.message)) from error

    def _final_rows(self, outcomes):
        documents = Document.objects.in_bulk([o.document_id for o in outcomes if o.document_id])
        rows = []
        for outcome in outcomes:
            document = documents.get(outcome.document_id)
            if document is None:
                rows.append(outcome)
                continue
            seconds = sum((document.metadata.get("stage_seconds") or {}).values())
            error = f"{document.error_code}: {document.error_message}" if document.status == DocumentStatus.FAILED else ""
            rows.append(bulk.FileOutcome(outcome.path, document.pk, document.status, document.chunk_count, seconds, error, outcome.duplicate))
        return rows

    def _print_table(self, rows, elapsed: float) -> None:
        width = max([len(str(r.path)) for r in rows] + [4])
        self.stdout.write(f"{'file'.ljust(width)}  {'status':<9} {'chunks':>6} {'seconds':>8}  note")
        for row in rows:
            note = row.error or ("duplicate" if row.duplicate else "")
            style = self.style.ERROR if row.status in ("failed", "refused") else (lambda s: s)
            self.stdout.write(style(f"{str(row.path).ljust(width)}  {row.status:<9} {row.chunks:>6} {row.seconds:>8.2f}  {note}"))
        self.stdout.write(f"{len(rows)} files in {elapsed:.1f} s")
