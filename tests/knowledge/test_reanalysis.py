"""A dictionary edited after indexing: re-analysis rewrites the BM25 terms in place."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

from engines.ports import DocumentFilter
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.epochs import current_epoch
from knowledge.models import Chunk, DocumentStatus
from knowledge.documents.reanalysis import reanalyse_knowledge_base
from knowledge.vectors import store_for
from tests.milvus import admin_client

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCT = "星河云盘为每位员工提供 2TB 存储空间，离职后数据保留 30 天。"
OTHER = "星河手机用户可以在设置里打开云盘，同步相册和通讯录，还能备份聊天记录。"


@pytest.fixture
def kb_with_two_ready_documents(db, milvus, run_tasks, media_root):
    from tests.conftest import make_kb

    kb = make_kb()
    for name, text in (("云盘.txt", PRODUCT), ("手机.txt", OTHER)):
        document_services.upload_documents(kb=kb, files=[SimpleUploadedFile(name, text.encode())], actor=None)
    assert set(kb.documents.values_list("status", flat=True)) == {DocumentStatus.READY}
    return kb


def stored_terms(kb) -> dict[int, str]:
    store = store_for(kb)
    client = admin_client(settings.MILVUS_URI)
    rows = client.query(store.chunks_collection, filter=f"kb_id == {kb.pk}", output_fields=["id", "content"])
    client.close()
    return {int(r["id"]): r["content"] for r in rows}


def test_reanalysis_applies_a_new_dictionary_to_indexed_chunks(kb_with_two_ready_documents):
    # given: the dictionary is added after both documents were indexed
    kb = kb_with_two_ready_documents
    catalog_services.update_knowledge_base(kb=kb, actor=None, custom_terms="星河云盘\n")
    kb.refresh_from_db()
    epoch_before = current_epoch(kb_id=kb.pk)[0]
    assert not any("星河云盘" in terms.split() for terms in stored_terms(kb).values())

    # when
    report = reanalyse_knowledge_base(kb_id=kb.pk)

    # then: the product chunk carries the whole term, the vectors are the ones it had
    assert report["chunks"] == Chunk.objects.filter(knowledge_base=kb).count()
    product = Chunk.objects.get(knowledge_base=kb, content__contains="星河云盘")
    assert "星河云盘" in stored_terms(kb)[product.pk].split()
    hits = store_for(kb).search_sparse(
        kb_id=kb.pk, query="星河云盘", limit=5, documents=DocumentFilter(exclude=()),
        dictionary=kb.dictionary_terms,
    )
    assert hits[0].id == product.pk
    dense = store_for(kb).search_dense(
        kb_id=kb.pk, vector=_embedding(kb, product.content), limit=1, documents=DocumentFilter(exclude=())
    )
    assert dense[0].id == product.pk and dense[0].score > 0.99
    assert set(kb.documents.values_list("status", flat=True)) == {DocumentStatus.READY}
    assert current_epoch(kb_id=kb.pk)[0] > epoch_before


def test_scheduling_runs_the_reanalysis_task_after_commit(kb_with_two_ready_documents):
    # given
    kb = kb_with_two_ready_documents
    catalog_services.update_knowledge_base(kb=kb, actor=None, custom_terms="星河云盘")

    # when
    document_services.schedule_reanalysis(kb=kb, actor=None)

    # then: the task ran (inline worker) and rewrote the terms
    product = Chunk.objects.get(knowledge_base=kb, content__contains="星河云盘")
    assert "星河云盘" in stored_terms(kb)[product.pk].split()


def _embedding(kb, text: str):
    from engines.providers import get_embedder

    return get_embedder(kb.embedding_model, kb.embedding_dimension).embed_documents([text])[0]


def test_a_knowledge_base_on_the_old_analysis_says_the_dictionary_cannot_apply(db):
    # given: a KB created before terms-v1 (Milvus analyses its text itself)
    from ragsite.errors import InvalidTransition
    from tests.conftest import make_kb

    kb = make_kb()
    kb.__class__.objects.filter(pk=kb.pk).update(text_analysis="jieba")
    kb.refresh_from_db()

    # when / then: a clear refusal instead of a re-analysis that changes nothing
    with pytest.raises(InvalidTransition) as refused:
        document_services.schedule_reanalysis(kb=kb, actor=None)
    assert refused.value.code == "legacy_text_analysis"
