"""Keeping the FAQ question index in Milvus in step with the FAQ rows.

Each enabled FAQ is indexed as one record per question (the standard one and each similar one),
so a user question close to any phrasing finds it. Indexing runs after commit as a task, reads the
rows as they are then, and is idempotent: it first removes every record of the FAQ.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import transaction
from django_tasks import task

from engines.ports import FaqRecord, UnembeddableText
from engines.providers import get_embedder

from knowledge.models import FAQ, KnowledgeBase
from knowledge.vectors import store_for

logger = logging.getLogger(__name__)

# Record ids are faq_id * STRIDE + question index; this bounds similar questions per FAQ.
RECORD_STRIDE = 1000
MAX_QUESTIONS_PER_FAQ = 50


def record_id(faq_id: int, index: int) -> int:
    return faq_id * RECORD_STRIDE + index


def schedule_faq_reindex(*, kb_id: int, faq_ids: Sequence[int]) -> None:
    ids = list(faq_ids)

    transaction.on_commit(lambda: index_faqs.enqueue(kb_id=kb_id, faq_ids=ids))


def reindex_faqs(*, kb_id: int, faq_ids: Sequence[int]) -> int:
    """Bring the index of these FAQs in line with the database; returns records written."""
    kb = KnowledgeBase.objects.get(pk=kb_id)
    store = store_for(kb)
    store.delete_faqs(kb_id=kb_id, faq_ids=list(faq_ids))
    faqs = list(FAQ.objects.filter(knowledge_base_id=kb_id, pk__in=faq_ids, enabled=True))
    pending: list[tuple[int, int, str]] = []
    for faq in faqs:
        questions = [faq.question, *faq.similar_questions][:MAX_QUESTIONS_PER_FAQ]
        pending.extend((record_id(faq.pk, i), faq.pk, q) for i, q in enumerate(questions))
    if not pending:
        return 0
    embedder = get_embedder(kb.embedding_model, kb.embedding_dimension)
    try:
        vectors = embedder.embed_documents([question for _, _, question in pending])
    except UnembeddableText as exc:
        # One phrasing the engine cannot take must not keep the FAQ's other phrasings (or the
        # other FAQs of the batch) out of the index: leave it out, say so, index the rest.
        refused = set(exc.indexes)
        logger.error("FAQ questions %s cannot be embedded; indexing without them",
                     [rid for i, (rid, _, _) in enumerate(pending) if i in refused])
        pending = [item for i, item in enumerate(pending) if i not in refused]
        vectors = embedder.embed_documents([question for _, _, question in pending]) if pending else []
    store.upsert_faqs(
        [
            FaqRecord(record_id=rid, kb_id=kb_id, faq_id=fid, question=question, vector=vector)
            for (rid, fid, question), vector in zip(pending, vectors, strict=True)
        ],
        dictionary=kb.dictionary_terms,
    )
    return len(pending)


def reindex_all_faqs(*, kb_id: int) -> int:
    return reindex_faqs(kb_id=kb_id, faq_ids=list(FAQ.objects.filter(knowledge_base_id=kb_id).values_list("pk", flat=True)))


@task(queue_name="ingestion")
def index_faqs(*, kb_id: int, faq_ids: list[int]) -> dict:
    return {"kb_id": kb_id, "records": reindex_faqs(kb_id=kb_id, faq_ids=faq_ids)}
