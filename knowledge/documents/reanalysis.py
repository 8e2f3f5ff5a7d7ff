"""Re-analysing a knowledge base's index after its dictionary changed."""

from __future__ import annotations

from django.db import transaction
from django_tasks import task

from knowledge.epochs import bump_epoch
from knowledge.faqs.index import reindex_all_faqs
from knowledge.models import Chunk, KnowledgeBase
from knowledge.vectors import store_for

REANALYSE_BATCH = 500


def reanalyse_knowledge_base(*, kb_id: int) -> dict[str, int]:
    """Apply the knowledge base's current dictionary to what is already indexed: chunk texts are
    re-analysed in place (vectors kept, documents stay READY and searchable), FAQs re-indexed,
    and the cache epoch moves so no result computed under the old terms is served."""
    kb = KnowledgeBase.objects.get(pk=kb_id)
    store = store_for(kb)
    dictionary = kb.dictionary_terms
    chunks = Chunk.objects.filter(knowledge_base_id=kb_id).order_by("pk").values_list("pk", "content")
    rewritten = 0
    batch: dict[int, str] = {}
    for chunk_id, content in chunks.iterator(chunk_size=REANALYSE_BATCH):
        batch[chunk_id] = content
        if len(batch) >= REANALYSE_BATCH:
            rewritten += store.reanalyse_chunks(kb_id=kb_id, contents=batch, dictionary=dictionary)
            batch = {}
    if batch:
        rewritten += store.reanalyse_chunks(kb_id=kb_id, contents=batch, dictionary=dictionary)
    faq_records = reindex_all_faqs(kb_id=kb_id)
    with transaction.atomic():
        bump_epoch(kb_id=kb_id)
    return {"chunks": rewritten, "faq_records": faq_records}


@task(queue_name="ingestion")
def reanalyse_task(*, kb_id: int) -> dict:
    return {"kb_id": kb_id, **reanalyse_knowledge_base(kb_id=kb_id)}
