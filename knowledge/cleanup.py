"""Purging a document: rows inside the transaction, files and vectors after it commits.

If the commit fails nothing is lost; if file or vector deletion fails after commit, the leftovers
are unreachable (no row points at them, searches re-filter by READY documents) and are logged.
"""

from __future__ import annotations

import logging

from django.db import transaction

from engines.providers import get_vector_store
from engines.ports import VectorStoreError

from knowledge.models import Document, DocumentAsset, KnowledgeBase
from knowledge.previews import delete_document_previews

logger = logging.getLogger(__name__)


def delete_asset_files_after_commit(keys: list[str]) -> None:
    """Delete asset images once no asset row points at them any more.

    Assets are content-addressed per knowledge base, so two documents with the same picture (a
    logo) share one file: a file goes only when its last reference does, checked after commit.
    """
    keys = [key for key in keys if key]
    if keys:
        transaction.on_commit(lambda: delete_unreferenced_asset_files(keys))


def delete_unreferenced_asset_files(keys: list[str]) -> None:
    """Delete those of these asset images that no asset row points at (now, outside any
    transaction: after a commit, or after a rollback left files that no row refers to)."""
    keys = [key for key in keys if key]
    if not keys:
        return
    still_used = set(DocumentAsset.objects.filter(file__in=keys).values_list("file", flat=True))
    storage = DocumentAsset._meta.get_field("file").storage
    for key in set(keys) - still_used:
        _delete_file(storage, key)


def _delete_file(storage, key: str) -> None:
    # After commit no row points at the file any more: a failure leaves an unreachable file.
    try:
        storage.delete(key)
    except OSError as exc:
        logger.warning("could not delete stored file %s: %s", key, exc)


def delete_previews_after_commit(*, kb_id: int, document_id: int) -> None:
    """A document's chunks were replaced or removed: their stored previews show chunks that are
    gone (new chunks get new ids and previews of their own)."""
    transaction.on_commit(lambda: delete_document_previews(kb_id=kb_id, document_id=document_id))


def schedule_purge(document: Document) -> None:
    kb = document.knowledge_base
    kb_id, document_id = kb.pk, document.pk
    model, dimension, analysis = kb.embedding_model, kb.embedding_dimension, kb.text_analysis
    storage = Document._meta.get_field("file").storage
    original = document.file.name
    asset_keys = list(DocumentAsset.objects.filter(document=document).values_list("file", flat=True))
    document.delete()
    delete_asset_files_after_commit(asset_keys)

    def purge_outside_transaction() -> None:
        _delete_original_if_unreferenced(storage, kb_id=kb_id, key=original)
        # Previews are per document (their folder is named by its id): nothing else shares them.
        delete_document_previews(kb_id=kb_id, document_id=document_id)
        delete_document_vectors(
            kb_id=kb_id, document_id=document_id, embedding_model=model, dimension=dimension,
            analysis=analysis,
        )

    transaction.on_commit(purge_outside_transaction)


def _delete_original_if_unreferenced(storage, *, kb_id: int, key: str) -> None:
    """The same bytes uploaded again to the knowledge base get the same key: delete the file
    only if no row points at it, under the KB lock uploads register under."""
    with transaction.atomic():
        KnowledgeBase.objects.select_for_update().filter(pk=kb_id).first()
        if Document.objects.filter(knowledge_base_id=kb_id, file=key).exists():
            return
        _delete_file(storage, key)


def delete_document_vectors(
    *, kb_id: int, document_id: int, embedding_model: str, dimension: int, analysis: str
) -> None:
    try:
        get_vector_store(embedding_model=embedding_model, dimension=dimension, analysis=analysis).delete_document(
            kb_id=kb_id, document_id=document_id
        )
    except VectorStoreError as exc:
        # Stale vectors cannot surface: every search re-filters hits by READY documents.
        logger.warning("could not delete vectors of document %s: %s", document_id, exc)


def schedule_knowledge_base_purge(kb) -> None:
    """After the commit that deletes a knowledge base's rows: its originals, asset images,
    previews, and every chunk and FAQ vector. Read now, used after commit (the rows are gone)."""
    kb_id = kb.pk
    space = (kb.embedding_model, kb.embedding_dimension, kb.text_analysis)
    storage = Document._meta.get_field("file").storage
    asset_storage = DocumentAsset._meta.get_field("file").storage
    originals = list(Document.objects.filter(knowledge_base=kb).values_list("pk", "file"))
    assets = list(DocumentAsset.objects.filter(document__knowledge_base=kb).values_list("file", flat=True))

    def purge() -> None:
        for document_id, key in originals:
            _delete_file(storage, key)
            delete_document_previews(kb_id=kb_id, document_id=document_id)
        for key in set(assets):
            _delete_file(asset_storage, key)
        model, dimension, analysis = space
        try:
            get_vector_store(embedding_model=model, dimension=dimension, analysis=analysis).delete_knowledge_base(
                kb_id=kb_id
            )
        except VectorStoreError as exc:
            # Unreachable leftovers: every search is filtered by the knowledge base id.
            logger.warning("could not delete vectors of knowledge base %s: %s", kb_id, exc)

    transaction.on_commit(purge)
