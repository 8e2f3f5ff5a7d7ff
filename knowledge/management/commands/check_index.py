"""manage.py check_index [--kb SLUG] [--repair]: the database and Milvus agree chunk for chunk."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from engines.ports import VectorStoreError

from knowledge.documents.consistency import check_knowledge_base, repair
from knowledge.models import KnowledgeBase


class Command(BaseCommand):
    help = "检查数据库中的分块与 Milvus 中的向量是否一一对应；--repair 删除多余向量并重建缺失向量的文档。"

    def add_arguments(self, parser):
        parser.add_argument("--kb", help="knowledge base slug (default: all)")
        parser.add_argument("--repair", action="store_true")

    def handle(self, *args, **options):
        kbs = KnowledgeBase.objects.order_by("slug")
        if options["kb"]:
            kbs = kbs.filter(slug=options["kb"])
            if not kbs.exists():
                raise CommandError(f"知识库 {options['kb']} 不存在。")
        drifted = 0
        for kb in kbs:
            try:
                drift = check_knowledge_base(kb)
            except VectorStoreError as exc:
                raise CommandError(f"无法读取 {kb.slug} 的向量库：{exc}") from exc
            missing, orphans = sum(drift.missing.values()), sum(drift.orphans.values())
            state = "ok" if drift.clean else "drift"
            self.stdout.write(
                f"{kb.slug}: {state} — {drift.documents_checked} documents, {drift.chunks_checked} chunks, "
                f"{missing} chunks without vector in {len(drift.missing)} ready documents, "
                f"{orphans} stray vectors"
            )
            if not drift.clean:
                drifted += 1
                if options["repair"]:
                    try:
                        repair(kb, drift)
                    except VectorStoreError as exc:
                        raise CommandError(f"无法修复 {kb.slug} 的向量库：{exc}") from exc
                    self.stdout.write(
                        f"{kb.slug}: repaired — deleted {orphans} stray vectors, re-queued "
                        f"{len(drift.missing)} documents"
                    )
        if drifted and not options["repair"]:
            raise CommandError(f"{drifted} 个知识库的索引与数据库不一致（加 --repair 修复）。")
