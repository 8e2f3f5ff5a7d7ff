"""Does Milvus hold exactly the vectors of the database's chunks? Report drift and repair it."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction

from .ingestion import queue_documents
from .models import Chunk, Document, DocumentStatus, KnowledgeBase
from .vectors import store_for

# One Milvus query returns at most this many ids; documents are checked in groups below it.
_GROUP_CHUNKS = 8_000


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
    store = store_for(kb)
    drift = IndexDrift(kb_slug=kb.slug)
    rows: dict[int, set[int]] = {}
    for chunk_id, document_id in Chunk.objects.filter(knowledge_base=kb).values_list("pk", "document_id"):
        rows.setdefault(document_id, set()).add(chunk_id)
    ready = set(Document.objects.filter(knowledge_base=kb, status=DocumentStatus.READY).values_list("pk", flat=True))
    documents = sorted(set(Document.objects.filter(knowledge_base=kb).values_list("pk", flat=True)))
    for group in _groups(documents, rows):
        _compare(drift, rows, ready, group, store.chunk_ids(kb_id=kb.pk, document_ids=group))
    # vectors of documents that have no row at all any more
    for chunk_id, document_id in store.chunk_ids(kb_id=kb.pk, exclude_documents=documents).items():
        drift.orphans[document_id] = drift.orphans.get(document_id, 0) + 1
        drift.orphan_ids.append(chunk_id)
    drift.documents_checked = len(documents)
    drift.chunks_checked = sum(len(ids) for ids in rows.values())
    return drift


def _groups(documents: list[int], rows: dict[int, set[int]]):
    group: list[int] = []
    size = 0
    for document_id in documents:
        count = len(rows.get(document_id, ()))
        if group and size + count > _GROUP_CHUNKS:
            yield group
            group, size = [], 0
        group.append(document_id)
        size += count
    if group:
        yield group


def _compare(drift: IndexDrift, rows, ready, group, stored: dict[int, int]) -> None:
    by_document: dict[int, set[int]] = {}
    for chunk_id, document_id in stored.items():
        by_document.setdefault(document_id, set()).add(chunk_id)
    for document_id in group:
        expected = rows.get(document_id, set())
        present = by_document.get(document_id, set())
        if document_id in ready and expected - present:
            drift.missing[document_id] = len(expected - present)
        stray = present - expected
        if stray:
            drift.orphans[document_id] = len(stray)
            drift.orphan_ids.extend(sorted(stray))


def repair(kb: KnowledgeBase, drift: IndexDrift) -> None:
    """Delete stray vectors; re-index READY documents with missing vectors (they stay READY
    until their new run, then answer again with a complete index)."""
    if drift.orphan_ids:
        store_for(kb).delete_chunks(kb_id=kb.pk, chunk_ids=drift.orphan_ids)
    if drift.missing:
        with transaction.atomic():
            queue_documents(document_ids=sorted(drift.missing))
