"""A retrieval request may name the version whose documents answer (the release check's draft)."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.models import Document, KnowledgeBaseVersion, VersionStatus
from retrieval.contracts import RetrievalRequest
from retrieval.factory import build_retrieval_service
from tests.retrieval.test_api import DRAFT_ONLY, published_kb  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def retrieve(kb, question, **extra):
    return build_retrieval_service(kb).retrieve(
        RetrievalRequest(kb_id=kb.pk, question=question, top_k=10, mode="hybrid", **extra)
    )


def test_a_drafts_documents_answer_only_when_the_draft_is_asked_for(published_kb, staff_user):
    # given: a READY draft that adds a document the active version does not have
    document_services.upload_documents(kb=published_kb, actor=staff_user,
                              files=[SimpleUploadedFile("草稿.md", DRAFT_ONLY.encode())])
    draft = KnowledgeBaseVersion.objects.get(knowledge_base=published_kb, status=VersionStatus.READY)
    draft_doc = Document.objects.get(title="草稿")

    # when
    active = retrieve(published_kb, "年假调整为 20 天")
    drafted = retrieve(published_kb, "年假调整为 20 天", version_id=draft.pk)

    # then: the draft is searched with its own documents and says which version it was
    assert draft_doc.pk not in {r.document_id for r in active.results}
    assert draft_doc.pk in {r.document_id for r in drafted.results}
    assert drafted.trace.version == draft.number != active.trace.version


def test_a_request_for_a_version_neither_reads_nor_fills_the_cache(published_kb):
    # given
    version = published_kb.active_version

    # when: asked twice for the active version by id, then once the normal way
    first = retrieve(published_kb, "年假有几天", version_id=version.pk)
    second = retrieve(published_kb, "年假有几天", version_id=version.pk)
    normal = retrieve(published_kb, "年假有几天")

    # then: no candidate cache for the chosen version (query embeddings, which do not depend on
    # the version, may still be shared); the normal request misses: nothing was stored
    def candidate_events(response):
        return [e for e in response.trace.cache.events if e.stage in ("epoch", "doc_retrieval")]

    assert candidate_events(first) == candidate_events(second) == []
    assert [(e.stage, e.hit) for e in normal.trace.cache.events if e.stage == "doc_retrieval"] == [("doc_retrieval", False)]


def test_a_version_of_another_knowledge_base_yields_nothing(published_kb, staff_user):
    # given
    from tests.conftest import make_kb

    other = make_kb()
    foreign = catalog_services.create_draft_version(kb=other, actor=staff_user)

    # when
    response = retrieve(published_kb, "年假有几天", version_id=foreign.pk)

    # then
    assert response.results == () and response.trace.empty_reason == "no_such_version"
