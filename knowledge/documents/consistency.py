"""Does Milvus hold exactly the vectors of the database's chunks? Report drift and repair it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db import transaction

from knowledge.documents.ingestion.queue import queue_documents
from knowledge.models import Chunk, Document, DocumentStatus, KnowledgeBase
from knowledge.vectors import store_for


@dataclass
class IndexDrift:
    kb_slug: str
    documents_checked: int = 0
    chunks_checked: int = 0
    # READY documents some of whose chunks have no vector (they cannot be found by search)
    missing: dict[int, int] = field(default_factory=dict)  # document id → chunks without vector
    # vectors with no chunk row (a re-index or purge that did not finish deleting)
    orphans: dict[int, int] = field(default_factory=dict)  # document id → stray vectors
    orphan_ids: list[int] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.missing and not self.orphans


def check_knowledge_base(kb: KnowledgeBase) -> IndexDrift:
    """Raises VectorStoreError when Milvus cannot be read."""
    stored = store_for(kb).chunk_ids(kb_id=kb.pk)
    rows = dict(Chunk.objects.filter(knowledge_base=kb).values_list("pk", "document_id"))
    ready = set(Document.objects.filter(knowledge_base=kb, status=DocumentStatus.READY).values_list("pk", flat=True))
    orphan_ids = sorted(chunk_id for chunk_id in stored if chunk_id not in rows)
    return IndexDrift(
        kb_slug=kb.slug,
        documents_checked=Document.objects.filter(knowledge_base=kb).count(),
        chunks_checked=len(rows),
        missing=dict(Counter(d for chunk_id, d in rows.items() if d in ready and chunk_id not in stored)),
        orphans=dict(Counter(stored[chunk_id] for chunk_id in orphan_ids)),
        orphan_ids=orphan_ids,
    )


def repair(kb: KnowledgeBase, drift: IndexDrift) -> None:
    """Delete stray vectors; re-index READY documents with missing vectors (they stay READY
    until their new run, then answer again with a complete index)."""
    if drift.orphan_ids:
        store_for(kb).delete_chunks(kb_id=kb.pk, chunk_ids=drift.orphan_ids)
    if drift.missing:
        with transaction.atomic():
            queue_documents(document_ids=sorted(drift.missing))
