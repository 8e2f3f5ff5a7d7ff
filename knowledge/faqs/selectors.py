"""Reads of FAQs. Nothing here writes."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import F, Window
from django.db.models.functions import RowNumber

from knowledge.models import FAQ



def example_questions(*, kb_ids: Iterable[int], limit: int = 4) -> dict[int, list[str]]:
    """Per knowledge base, the standard questions of its most asked enabled FAQs: what the empty
    chat page offers a newcomer to click. One query whatever the number of bases."""
    ranked = (
        FAQ.objects.filter(knowledge_base_id__in=list(kb_ids), enabled=True)
        .annotate(rank=Window(RowNumber(), partition_by=F("knowledge_base_id"),
                              order_by=[F("hit_count").desc(), F("pk").asc()]))
        .filter(rank__lte=limit)
        .order_by("knowledge_base_id", "rank")
        .values_list("knowledge_base_id", "question")
    )
    examples: dict[int, list[str]] = {}
    for kb_id, question in ranked:
        examples.setdefault(kb_id, []).append(question)
    return examples
