"""First-run setup for `make run`: a staff account and, on a new database, the demo knowledge base."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from knowledge.documents import bulk
from knowledge.catalog import services as catalog_services
from knowledge.faqs import services as faq_services
from knowledge.items import services as item_services
from knowledge.models import Document, DocumentStatus, KnowledgeBase, Visibility

DEMO_SLUG = "demo"


class Command(BaseCommand):
    help = "创建管理员账号（首次运行时打印一次密码），新数据库时导入并发布演示知识库。"

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")
        parser.add_argument("--no-demo", action="store_true")

    def handle(self, *args, **options):
        self._ensure_staff_user(options["username"])
        if options["no_demo"]:
            return
        if KnowledgeBase.objects.exists():
            self.stdout.write("数据库中已有知识库，跳过演示数据。")
            return
        self._load_demo()

    def _ensure_staff_user(self, username: str) -> None:
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            self.stdout.write("管理员账号已存在（忘记密码可运行 .venv/bin/python manage.py changepassword admin）。")
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(self.style.SUCCESS("已创建管理员账号（密码只显示这一次，请妥善保存）："))
        self.stdout.write(f"  用户名: {username}")
        self.stdout.write(f"  密码:   {password}")

    def _load_demo(self) -> None:
        from demo.build import build_demo_corpus
        from demo.content import MANIFEST
        from demo.faqs import FAQS
        from demo.items import ITEMS

        out_dir = settings.VAR_DIR / "demo"
        self.stdout.write("正在生成并导入演示知识库（首次运行需要几十秒，含扫描件 OCR）…")
        try:
            paths = build_demo_corpus(out_dir)
        except (OSError, RuntimeError) as exc:
            raise CommandError(f"生成演示文档失败：{exc}") from exc
        with transaction.atomic():
            kb = catalog_services.create_knowledge_base(
                slug=DEMO_SLUG, name="星河智造演示知识库",
                description="虚构公司「星河智造」的员工手册、IT 服务台指南和产品手册，用于体验问答与引用。",
                visibility=Visibility.PUBLIC, support_contact="IT 服务台（分机 8000）", actor=None,
            )
            for faq in FAQS:
                faq_services.save_faq(
                    kb=kb, question=faq["question"], answer=faq["answer"],
                    similar_questions=faq.get("similar_questions", []),
                    source_tag=faq.get("source_tag", ""), actor=None,
                )
            # Before the documents: ingestion tags each chunk with the items it is about.
            for item in ITEMS:
                item_services.save_item(kb=kb, actor=None, **item)
        manifest = {entry.name: entry for entry in MANIFEST}
        ids = []
        for path in paths:
            entry = manifest.get(path.name)
            outcome = bulk.upload_paths(
                kb=kb, paths=[path], source_tag=entry.source_tag if entry else "demo",
                titles=[entry.title] if entry else None,
            )[0]
            ids.append(outcome.document.pk)
        bulk.process_queue_until_done(ids)
        failed = Document.objects.filter(pk__in=ids, status=DocumentStatus.FAILED)
        if failed:
            for document in failed:
                self.stderr.write(self.style.ERROR(f"{document.title}: {document.error_code} {document.error_message}"))
            raise CommandError("演示文档导入失败。")
        version = bulk.publish_when_ready(kb=kb, reason="演示知识库初始化")
        self.stdout.write(self.style.SUCCESS(f"演示知识库已发布：{kb.name}（v{version.number}，{len(paths)} 个文件，{len(FAQS)} 条 FAQ）。"))
