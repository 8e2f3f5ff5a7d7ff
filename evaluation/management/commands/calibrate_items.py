"""manage.py calibrate_items [--kb SLUG]

Runs the item-confirmation set (`demo.item_questions`, written for the demo catalog) against a
knowledge base's catalog (the demo's by default, built from `demo.items` when no base is given),
prints how often each rule concluded right at the rules file's thresholds, then the thresholds
of the grid that conclude right most often."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from chat.pipeline.rules import load_rules
from demo.item_questions import CASES
from demo.items import ITEMS
from knowledge.items.matching import CatalogItem, ItemCatalog
from knowledge.items.selectors import catalog_for
from knowledge.models import KnowledgeBase

from ...item_confirmation import by_expectation, by_rule, calibrate, run_cases


def demo_catalog() -> ItemCatalog:
    return ItemCatalog(
        CatalogItem(id=number, name=item["name"], aliases=tuple(item["aliases"]), codes=tuple(item["codes"]),
                    group=item["group"], group_aliases=tuple(item["group_aliases"]), description=item["description"])
        for number, item in enumerate(ITEMS, 1)
    )


class Command(BaseCommand):
    help = "用商品确认测试集检查规则 A–C 的判断，并给出判断最准的阈值。"

    def add_arguments(self, parser):
        parser.add_argument("--kb", help="知识库标识（默认用演示商品目录，不读数据库）")

    def handle(self, *args, **options):
        if options["kb"]:
            kb = KnowledgeBase.objects.filter(slug=options["kb"]).first()
            if kb is None:
                raise CommandError(f"知识库不存在：{options['kb']}")
            catalog = catalog_for(kb_ids=[kb.pk])
        else:
            catalog = demo_catalog()
        if not catalog:
            raise CommandError("该知识库没有启用的商品/型号。")
        rules = load_rules()
        results = run_cases(CASES, catalog=catalog, rules=rules)
        right = sum(r.right for r in results)
        self.stdout.write(f"规则文件阈值：high={rules.items.high} low={rules.items.low} "
                          f"group_score={rules.items.group_score} min_fuzzy={rules.items.min_fuzzy}")
        self.stdout.write(f"判断正确 {right}/{len(results)}")
        self.stdout.write("规则  题数  正确  正确率")
        for row in by_rule(results):
            self.stdout.write(f"{row['rule']:<5} {row['count']:>4} {row['right']:>5} {row['accuracy']:>7.1%}")
        self.stdout.write("期望  题数  正确  正确率")
        for row in by_expectation(results):
            self.stdout.write(f"{row['expected']:<7} {row['count']:>4} {row['right']:>5} {row['accuracy']:>7.1%}")
        for result in results:
            if not result.right:
                self.stdout.write(f"  ✗ [{result.expected}] {result.question} → 规则 {result.rule}，确认 "
                                  f"{list(result.confirmed)}，候选 {list(result.candidates)}")
        best, accuracy, ties = calibrate(CASES, catalog=catalog, rules=rules)
        self.stdout.write(f"网格中最准：high={best.high} low={best.low} group_score={best.group_score} "
                          f"min_fuzzy={best.min_fuzzy}（正确率 {accuracy:.1%}，{ties} 组阈值同样准）")
