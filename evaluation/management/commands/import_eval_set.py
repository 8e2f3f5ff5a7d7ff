"""manage.py import_eval_set (PATH | --demo) --name NAME [--kb SLUG] [--default] [--if-new]

PATH is a folder in the shared layout (queries.jsonl + qrels.jsonl) or a JSONL / CSV / XLSX file
in the knowledge-base-native layout (see evaluation/importers.py). Importing again replaces the
set's cases by key: the same file twice changes nothing."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from knowledge.models import KnowledgeBase
from ragsite.errors import DomainError

from ...demo import DEMO_SET, DEMO_SOURCE, demo_cases
from ...importers import read_native_file, read_shared_dataset
from ...selectors import eval_set_exists, has_default_eval_set
from ...services import import_eval_set


class Command(BaseCommand):
    help = "导入评测集（共享评测集目录，或 JSONL / CSV / XLSX 文件）。"

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", help="shared-layout folder, or a .jsonl / .csv / .xlsx file")
        parser.add_argument("--demo", action="store_true", help="the demo knowledge base's set (name: demo)")
        parser.add_argument("--name", help="evaluation set name (default: the folder or file name)")
        parser.add_argument("--kb", help="knowledge base slug the set belongs to")
        parser.add_argument("--default", action="store_true", help="make it the knowledge base's default set")
        parser.add_argument("--description", default="")
        parser.add_argument(
            "--if-new", action="store_true",
            help="do nothing when --kb does not exist or already has a set of this name, and make it the "
                 "default only if the base has none (make run imports the demo's set once this way)",
        )

    def handle(self, *args, **options):
        if options["demo"] == bool(options["path"]):
            raise CommandError("请给出一个评测文件或目录，或者 --demo（二选一）。")
        path = Path(options["path"] or DEMO_SET)
        if not options["demo"] and not path.exists():
            raise CommandError(f"找不到路径：{path}")
        name = options["name"] or (path.name if path.is_dir() or options["demo"] else path.stem)
        kb = None
        if options["kb"]:
            kb = KnowledgeBase.objects.filter(slug=options["kb"]).first()
            if kb is None and options["if_new"]:
                self.stdout.write(f"知识库 {options['kb']} 不存在，跳过评测集导入。")
                return
            if kb is None:
                raise CommandError(f"知识库 {options['kb']} 不存在。")
        default = options["default"]
        if options["if_new"]:
            if eval_set_exists(knowledge_base=kb, name=name):
                self.stdout.write(f"评测集 {name} 已存在，跳过导入。")
                return
            # A default that staff chose stays: the new set only fills the place when it is empty.
            default = default and not has_default_eval_set(knowledge_base=kb)
        try:
            if options["demo"]:
                cases, source = demo_cases(), DEMO_SOURCE
            elif path.is_dir():
                cases, source = read_shared_dataset(path), str(path)
            else:
                cases, source = read_native_file(path.name, path.read_bytes()), str(path)
            outcome = import_eval_set(
                name=name,
                cases=cases, source=source,
                knowledge_base=kb, default=default, description=options["description"],
            )
        except DomainError as error:
            raise CommandError(str(error.message)) from error
        eval_set = outcome.eval_set
        unanswerable = eval_set.cases.filter(answerable=False).count()
        self.stdout.write(
            f"{eval_set.name}: {eval_set.cases.count()} cases ({unanswerable} unanswerable) — created {outcome.created}, "
            f"updated {outcome.updated}, removed {outcome.removed}, unchanged {outcome.unchanged}"
            + (f"; default of {kb.slug}" if eval_set.is_default and kb else "")
        )
