"""Retrieval with metadata filters on real components (ingestion, Milvus Lite, the local
provider, the database): the filters narrow what the vector store searches, the results are
checked against the facts again, the cache is keyed by them, and the trace, the API and the
admin hit test say which were applied."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from engines.ports import DocumentFilter
from knowledge import epochs
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.models import Document, KnowledgeBaseVersion, Visibility
from retrieval.contracts import NO_DOCUMENT_MATCHES_FILTERS, RetrievalRequest
from retrieval.factory import build_retrieval_service
from retrieval.filters import parse_filters
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db(transaction=True)

HANDBOOK = "# 员工手册\n\n## 年假\n\n入职满一年的员工每年享有 15 天带薪年假，年假需提前三个工作日申请。\n"
NEW_RULES = "# 年假新规\n\n## 年假\n\n自 2025 年起，入职满一年的员工每年享有 20 天带薪年假，年假可以分两次休完。\n"
PRODUCTS = "# 产品手册\n\n## 星河X3\n\n星河X3 是一款 Wi-Fi 6 路由器，保修期为 24 个月。\n"
QUESTION = "入职满一年的员工每年有多少天年假？"
THIS_YEAR = {"field": "生效日期", "op": "range", "gte": "2025-01-01", "lte": "2025-12-31"}
HR = {"field": "部门", "op": "eq", "value": "人力资源部"}


@pytest.fixture
def published_hr_kb(milvus, run_tasks, media_root, staff_user):
    """Three documents through real ingestion, published, with staff's metadata set afterwards:
    two HR documents (last year's rules and this year's) and a product manual."""
    kb = make_kb(visibility=Visibility.INTERNAL)
    document_services.upload_documents(kb=kb, actor=staff_user, files=[
        SimpleUploadedFile("员工手册.md", HANDBOOK.encode()), SimpleUploadedFile("年假新规.md", NEW_RULES.encode()),
        SimpleUploadedFile("产品手册.md", PRODUCTS.encode()),
    ])
    catalog_services.activate_version(version=KnowledgeBaseVersion.objects.get(knowledge_base=kb), actor=staff_user)
    for title, attributes in (("员工手册", {"部门": "人力资源部", "生效日期": "2024-01-01"}),
                              ("年假新规", {"部门": "人力资源部", "生效日期": "2025-01-01"}),
                              ("产品手册", {"部门": "产品部"})):
        document_services.set_document_attributes(
            document=Document.objects.get(knowledge_base=kb, title=title), attributes=attributes, actor=staff_user)
    kb.refresh_from_db()
    cache.clear()
    epochs.l1_epochs.clear()
    return kb


def doc(kb, title: str) -> Document:
    return Document.objects.get(knowledge_base=kb, title=title)


class RecordingStore:
    """The knowledge base's real vector store, recording the document filter of each search;
    `ignoring_filters` searches every document instead, like an index that is behind the facts."""

    def __init__(self, store, *, ignoring_filters: bool = False) -> None:
        self.store = store
        self.ignoring_filters = ignoring_filters
        self.filters: list[DocumentFilter] = []

    def _documents(self, documents: DocumentFilter) -> DocumentFilter:
        self.filters.append(documents)
        return DocumentFilter(exclude=()) if self.ignoring_filters else documents

    def search_dense(self, *, documents, **kwargs):
        return self.store.search_dense(documents=self._documents(documents), **kwargs)

    def search_sparse(self, *, documents, **kwargs):
        return self.store.search_sparse(documents=self._documents(documents), **kwargs)


def service_with(kb, **store_options):
    service = build_retrieval_service(kb)
    service.store = RecordingStore(service.store, **store_options)
    return service, service.store


def search(client, kb, endpoint="explain", **body):
    return client.post(f"/api/retrieval/{endpoint}", {"knowledge_base_id": kb.slug, "question": QUESTION, **body},
                       format="json")


def test_the_vector_store_is_asked_only_for_the_documents_the_filters_admit(published_hr_kb):
    # given
    service, store = service_with(published_hr_kb)
    # when
    response = service.retrieve(RetrievalRequest(kb_id=published_hr_kb.pk, question=QUESTION, top_k=5,
                                                 filters=parse_filters([THIS_YEAR])))
    # then: one admitted document of three, pushed down as "in [it]" to every channel
    new_rules = doc(published_hr_kb, "年假新规")
    assert store.filters and all(f == DocumentFilter(include=(new_rules.pk,)) for f in store.filters)
    assert {r.document_id for r in response.results} == {new_rules.pk}
    assert "20 天" in response.results[0].content
    trace = response.trace
    assert trace.document_filter == "in"
    assert (trace.ready_document_count, trace.filter_admitted_count, trace.filter_ready_count) == (1, 1, 3)
    assert trace.as_dict()["filters"] == [{"field": "attributes.生效日期", "op": "range",
                                           "gte": "2025-01-01", "lte": "2025-12-31"}]


def test_without_filters_the_store_searches_every_ready_document(published_hr_kb):
    service, store = service_with(published_hr_kb)
    response = service.retrieve(RetrievalRequest(kb_id=published_hr_kb.pk, question=QUESTION, top_k=5))
    assert set(store.filters) == {DocumentFilter(exclude=())}
    assert "filters" not in response.trace.as_dict()
    assert len({r.document_id for r in response.results}) >= 2


def test_hits_outside_the_filters_are_dropped_after_recall(published_hr_kb):
    # given: a store that answers from every document, whatever it was asked
    service, store = service_with(published_hr_kb, ignoring_filters=True)
    products = doc(published_hr_kb, "产品手册")
    # when
    response = service.retrieve(RetrievalRequest(kb_id=published_hr_kb.pk, question=QUESTION, top_k=5,
                                                 filters=parse_filters([THIS_YEAR]), use_cache=False))
    unfiltered = service.retrieve(RetrievalRequest(kb_id=published_hr_kb.pk, question=QUESTION, top_k=5,
                                                   use_cache=False))
    # then: the other documents' hits came back from the store, and none of them got through
    assert len({r.document_id for r in unfiltered.results}) >= 2
    assert {r.document_id for r in response.results} == {doc(published_hr_kb, "年假新规").pk}
    assert products.pk not in {r.document_id for r in response.results}


def test_a_document_whose_attributes_changed_after_it_was_cached_is_dropped(published_hr_kb):
    # given: HR's documents, searched and cached
    service, store = service_with(published_hr_kb)
    request = RetrievalRequest(kb_id=published_hr_kb.pk, question=QUESTION, top_k=5, filters=parse_filters([HR]))
    first = service.retrieve(request)
    handbook = doc(published_hr_kb, "员工手册")
    assert handbook.pk in {r.document_id for r in first.results}
    # when: the handbook moves to another department by a write the cache did not hear of
    Document.objects.filter(pk=handbook.pk).update(attributes={"部门": "行政部"})
    again = service.retrieve(request)
    # then: served from the cache, and re-checked against the facts
    assert [e.hit for e in again.trace.cache.events if e.stage == "doc_retrieval"] == [True]
    assert handbook.pk not in {r.document_id for r in again.results}
    assert {r.document_id for r in again.results} == {doc(published_hr_kb, "年假新规").pk}


def test_editing_attributes_through_the_service_moves_the_cache_epoch(published_hr_kb, staff_user):
    service, _store = service_with(published_hr_kb)
    request = RetrievalRequest(kb_id=published_hr_kb.pk, question=QUESTION, top_k=5, filters=parse_filters([HR]))
    first = service.retrieve(request)
    # when: the product manual joins HR
    document_services.set_document_attributes(document=doc(published_hr_kb, "产品手册"),
                                              attributes={"部门": "人力资源部"}, actor=staff_user)
    epochs.l1_epochs.clear()  # this process's L1 is cleared after commit; be explicit about it
    again = service.retrieve(request)
    # then: a new epoch, recomputed, and the manual may answer now
    assert again.trace.cache_epoch == first.trace.cache_epoch + 1
    assert [e.hit for e in again.trace.cache.events if e.stage == "doc_retrieval"] == [False]
    assert again.trace.filter_admitted_count == 3


def test_the_cache_is_keyed_by_the_filters(member_api, published_hr_kb):
    def doc_cache(body):
        return [e["hit"] for e in body["trace"]["cache"]["events"] if e["stage"] == "doc_retrieval"]

    # when: the same question under two different filters, then the first again
    this_year = search(member_api, published_hr_kb, filters=[THIS_YEAR]).json()
    products = search(member_api, published_hr_kb, filters=[{"field": "部门", "op": "eq", "value": "产品部"}]).json()
    this_year_again = search(member_api, published_hr_kb, filters=[THIS_YEAR]).json()
    unfiltered = search(member_api, published_hr_kb).json()
    # then
    assert doc_cache(this_year) == [False] and doc_cache(products) == [False]
    assert doc_cache(this_year_again) == [True] and doc_cache(unfiltered) == [False]
    assert {r["document_id"] for r in this_year["results"]} == {doc(published_hr_kb, "年假新规").pk}
    assert {r["document_id"] for r in products["results"]} <= {doc(published_hr_kb, "产品手册").pk}
    assert this_year_again["results"] == this_year["results"]


def test_the_api_takes_filters_and_the_trace_shows_them(member_api, published_hr_kb):
    # when
    body = search(member_api, published_hr_kb, filters=[
        HR, {"field": "file_type", "op": "in", "value": ["md", "pdf"]},
    ]).json()
    # then
    assert {r["document_id"] for r in body["results"]} == {doc(published_hr_kb, "员工手册").pk, doc(published_hr_kb, "年假新规").pk}
    trace = body["trace"]
    assert trace["filters"] == [{"field": "attributes.部门", "op": "eq", "value": "人力资源部"},
                                {"field": "file_type", "op": "in", "value": ["md", "pdf"]}]
    assert (trace["filter_admitted_count"], trace["filter_ready_count"]) == (2, 3)
    assert trace["document_filter"] in ("in", "not_in")


def test_filters_that_admit_nothing_are_an_empty_result_not_an_error(member_api, published_hr_kb):
    body = search(member_api, published_hr_kb, filters=[{"field": "部门", "op": "eq", "value": "财务部"}]).json()
    assert body["results"] == []
    assert body["trace"]["empty_reason"] == NO_DOCUMENT_MATCHES_FILTERS
    assert (body["trace"]["filter_admitted_count"], body["trace"]["filter_ready_count"]) == (0, 3)
    plain = search(member_api, published_hr_kb, endpoint="search", filters=[{"field": "item", "op": "eq", "value": "星河X3"}])
    assert (plain.status_code, plain.json()) == (200, [])


@pytest.mark.parametrize("filters,words", [
    ([{"field": "部门", "op": "like", "value": "人力"}], "不认识的运算"),
    ([{"field": "title", "op": "range", "gte": "a"}], "不能按范围筛选"),
    ([HR] * 11, "最多 10 个"),
    ("not json", "JSON"),
])
def test_a_bad_filter_is_a_clear_400(member_api, published_hr_kb, filters, words):
    response = search(member_api, published_hr_kb, filters=filters)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"
    assert words in response.json()["detail"]


def test_the_hit_test_takes_filters_and_shows_them_in_words(client, staff_user, published_hr_kb):
    # given
    client.force_login(staff_user)
    url = reverse("hit-test", args=[published_hr_kb.pk])
    form = {"question": QUESTION, "mode": "hybrid", "top_k": 3, "candidate_k": 30}
    # when
    page = client.post(url, {**form, "filters": '[{"field": "生效日期", "op": "range", "gte": "2025-01-01", "lte": "2025-12-31"}]'})
    refused = client.post(url, {**form, "filters": '[{"field": "部门", "op": "between"}]'})
    nothing = client.post(url, {**form, "filters": '{"field": "部门", "op": "eq", "value": "财务部"}'})
    # then
    html = page.content.decode()
    assert page.status_code == 200
    assert "自 2025 年起" in html and "15 天带薪年假" not in html
    assert "生效日期 从 2025-01-01 到 2025-12-31" in html
    assert "就绪文档 3 篇中有 1 篇符合筛选条件" in html
    assert "第 1 个筛选条件：不认识的运算“between”" in refused.content.decode()
    assert "没有符合元数据筛选条件的已就绪文档" in nothing.content.decode()


def test_several_knowledge_bases_apply_the_filters_in_each(published_hr_kb, staff_user, milvus, run_tasks):
    # given: a second base of the same space, with one HR document of this year
    other = make_kb(visibility=Visibility.INTERNAL)
    document_services.upload_documents(
        kb=other, actor=staff_user, attributes={"部门": "人力资源部", "生效日期": "2025-06-01"},
        files=[SimpleUploadedFile("休假通知.md", "# 休假通知\n\n员工每年的年假天数以人力资源部公布为准。\n".encode())],
    )
    catalog_services.activate_version(version=KnowledgeBaseVersion.objects.get(knowledge_base=other), actor=staff_user)
    service = build_retrieval_service(published_hr_kb, also=[other])
    # when
    response = service.retrieve(RetrievalRequest(kb_id=published_hr_kb.pk, also_kb_ids=(other.pk,), question=QUESTION,
                                                 top_k=5, filters=parse_filters([THIS_YEAR])))
    # then
    assert {r.document_id for r in response.results} == {doc(published_hr_kb, "年假新规").pk, doc(other, "休假通知").pk}
    assert [kb.ready_document_count for kb in response.trace.knowledge_bases] == [1, 1]
    assert (response.trace.filter_admitted_count, response.trace.filter_ready_count) == (2, 4)
