"""Purging a document: rows inside the transaction, files and vectors after it commits.

If the commit fails nothing is lost; if file or vector deletion fails after commit, the leftovers
are unreachable (no row points at them, searches re-filter by READY documents) and are logged.
"""

from __future__ import annotations

import logging

from django.db import transaction

from .models import Document, DocumentAsset

logger = logging.getLogger(__name__)


def schedule_purge(document: Document) -> None:
    kb = document.knowledge_base
    kb_id, document_id = kb.pk, document.pk
    model, dimension = kb.embedding_model, kb.embedding_dimension
    storage = Document._meta.get_field("file").storage
    keys = [document.file.name] + list(
        DocumentAsset.objects.filter(document=document).values_list("file", flat=True)
    )
    document.delete()

    def purge_outside_transaction() -> None:
        for key in keys:
            if key:
                try:
                    storage.delete(key)
                except OSError as exc:
                    logger.warning("could not delete %s of document %s: %s", key, document_id, exc)
        delete_document_vectors(
            kb_id=kb_id, document_id=document_id, embedding_model=model, dimension=dimension
        )

    transaction.on_commit(purge_outside_transaction)


def delete_document_vectors(*, kb_id: int, document_id: int, embedding_model: str, dimension: int) -> None:
    from retrieval.milvus_store import get_vector_store
    from retrieval.ports import VectorStoreError

    try:
        get_vector_store(embedding_model=embedding_model, dimension=dimension).delete_document(
            kb_id=kb_id, document_id=document_id
        )
    except VectorStoreError as exc:
        # Stale vectors cannot surface: every search re-filters hits by READY documents.
        logger.warning("could not delete vectors of document %s: %s", document_id, exc)
