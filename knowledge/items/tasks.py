"""Detecting the chunk tags again in the background once the catalog changed."""

from __future__ import annotations

from django.db import transaction
from django_tasks import task

from knowledge import epochs
from knowledge.items.tagging import retag_knowledge_base


def schedule_retag(*, kb_id: int) -> None:
    transaction.on_commit(lambda: retag_items_task.enqueue(kb_id=kb_id))


@task(queue_name="ingestion")
def retag_items_task(*, kb_id: int) -> dict:
    written = retag_knowledge_base(kb_id=kb_id)
    # Tags decide what a question about an item reads: answers cached before are stale.
    epochs.bump_epoch(kb_id=kb_id)
    return {"kb_id": kb_id, "tags": written}
