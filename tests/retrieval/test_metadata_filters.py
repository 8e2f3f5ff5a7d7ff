"""Metadata filters: read from JSON, and resolved by the facts repository to the READY documents
of the version they admit — each op on built-in and custom fields, dates, items — in SQL that
SQLite and PostgreSQL both run."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.models import Chunk, ChunkItem, Document, DocumentStatus, Item, TagSource
from retrieval.cache import DjangoRetrievalCache
from retrieval.contracts import MAX_FILTERS, NO_DOCUMENT_MATCHES_FILTERS, MetadataFilter, RetrievalRequest
from retrieval.filters import InvalidFilter, parse_filter, parse_filters
from retrieval.repository import DjangoRepository
from retrieval.service import RetrievalService
from tests.conftest import make_document, make_kb, make_ready_version

from .fakes import FakeEmbedder, FakeRewriter, FakeStore

pytestmark = pytest.mark.django_db

SHANGHAI = dt.timezone(dt.timedelta(hours=8))


def _document(kb, *, title: str, file_type: str = "txt", source_tag: str = "", attributes=None,
              created_at: dt.datetime | None = None, actor=None) -> Document:
    document = make_document(kb, title=title)
    Document.objects.filter(pk=document.pk).update(
        file_type=file_type, source_tag=source_tag, created_at=created_at or timezone.now(),
    )
    if attributes is not None:
        document_services.set_document_attributes(document=document, attributes=attributes, actor=actor)
    document.refresh_from_db()
    return document


def _tag(document: Document, item: Item, *, source: str = TagSource.DETECTED, ordinal: int = 0) -> ChunkItem:
    chunk = Chunk.objects.create(document=document, knowledge_base=document.knowledge_base, ordinal=ordinal,
                                 content=f"{item.name} 的说明")
    return ChunkItem.objects.create(chunk=chunk, item=item, document=document, source=source)


@pytest.fixture
def catalogue(staff_user):
    """A published knowledge base of five documents with staff's metadata and item tags, and a
    document with matching metadata that is only in the draft."""
    kb = make_kb()
    docs = {
        "hr": _document(kb, title="员工手册", file_type="pdf", source_tag="hr-portal",
                        created_at=dt.datetime(2025, 1, 10, 9, 0, tzinfo=SHANGHAI),
                        attributes={"部门": "人力资源部", "生效日期": "2025-03-01", "密级": 2,
                                    "地区": ["华东", "华南"], "公开": True, "title": "人事"}),
        "it": _document(kb, title="IT 指南", file_type="docx", source_tag="it",
                        created_at=dt.datetime(2025, 6, 1, 12, 0, tzinfo=SHANGHAI),
                        attributes={"部门": "信息技术部", "生效日期": "2024-11-20T08:00:00", "密级": 5,
                                    "地区": ["华北"], "公开": False}),
        # 00:30 on 1 January in Shanghai is still 31 December in UTC: dates are the deployment's.
        "plain": _document(kb, title="通知", created_at=dt.datetime(2026, 1, 1, 0, 30, tzinfo=SHANGHAI)),
        "texts": _document(kb, title="草案说明", file_type="md",
                           created_at=dt.datetime(2025, 8, 8, 8, 0, tzinfo=SHANGHAI),
                           attributes={"密级": "3", "生效日期": "明年"}),
        "odd": _document(kb, title="杂项", created_at=dt.datetime(2024, 5, 5, 10, 0, tzinfo=SHANGHAI),
                         attributes={"密级": "高", "部门": ["人力资源部"]}),
    }
    router, switch = Item.objects.create(knowledge_base=kb, name="星河X3"), Item.objects.create(knowledge_base=kb, name="星河S1")
    _tag(docs["hr"], router)
    _tag(docs["it"], router, source=TagSource.EXCLUDED)  # names it, but staff said it is not about it
    _tag(docs["plain"], switch, source=TagSource.MANUAL)
    version = make_ready_version(kb, documents=list(docs.values()))
    catalog_services.activate_version(version=version, actor=staff_user)
    draft_only = _document(kb, title="草稿手册", file_type="pdf", attributes={"部门": "人力资源部"})
    catalog_services.create_draft_version(kb=kb, actor=staff_user).documents.add(draft_only)
    _tag(draft_only, router)
    kb.refresh_from_db()
    return kb, docs


def admitted(kb, *filters: dict, document_ids=None) -> set[int]:
    return set(DjangoRepository().ready_facts(kb_id=kb.pk, document_ids=document_ids,
                                              filters=parse_filters(list(filters)), with_ids=True).ready_ids)


def ids(docs, *names) -> set[int]:
    return {docs[name].pk for name in names}


# --- each op on each kind of field ---------------------------------------------------------------


@pytest.mark.parametrize("given,expected", [
    ({"field": "部门", "op": "eq", "value": "人力资源部"}, ("hr", "odd")),  # "odd" holds it in a list
    ({"field": "attributes.部门", "op": "eq", "value": "人力资源部"}, ("hr", "odd")),
    ({"field": "部门", "op": "in", "value": ["信息技术部", "财务部"]}, ("it",)),
    ({"field": "地区", "op": "eq", "value": "华南"}, ("hr",)),
    ({"field": "地区", "op": "in", "value": ["华北", "西南"]}, ("it",)),
    ({"field": "公开", "op": "eq", "value": True}, ("hr",)),
    ({"field": "公开", "op": "eq", "value": False}, ("it",)),
    ({"field": "密级", "op": "eq", "value": 5}, ("it",)),
    ({"field": "密级", "op": "in", "value": [2, 5]}, ("hr", "it")),
    # a key named like a built-in is an attribute only with the prefix
    ({"field": "attributes.title", "op": "eq", "value": "人事"}, ("hr",)),
    ({"field": "title", "op": "eq", "value": "人事"}, ()),
    ({"field": "title", "op": "eq", "value": "IT 指南"}, ("it",)),
    ({"field": "title", "op": "in", "value": ["员工手册", "通知"]}, ("hr", "plain")),
    ({"field": "file_type", "op": "in", "value": ["PDF", "docx"]}, ("hr", "it")),
    ({"field": "file_type", "op": "eq", "value": "md"}, ("texts",)),
    ({"field": "source_tag", "op": "eq", "value": "hr-portal"}, ("hr",)),
    ({"field": "source_tag", "op": "in", "value": ["it", "none"]}, ("it",)),
])
def test_eq_and_in_on_built_in_and_custom_fields(catalogue, given, expected):
    kb, docs = catalogue
    assert admitted(kb, given) == ids(docs, *expected)


@pytest.mark.parametrize("given,expected", [
    # numbers compare as numbers; a number written as text counts, any other text never does
    ({"field": "密级", "op": "range", "gte": 2, "lte": 4}, ("hr", "texts")),
    ({"field": "密级", "op": "range", "gte": 3}, ("it", "texts")),
    ({"field": "密级", "op": "range", "lte": 2.5}, ("hr",)),
    # ISO dates compare as dates; a date with a time counts on its day
    ({"field": "生效日期", "op": "range", "gte": "2024-11-20", "lte": "2024-12-31"}, ("it",)),
    ({"field": "生效日期", "op": "range", "gte": "2025-01-01", "lte": "2025-12-31"}, ("hr",)),
    ({"field": "生效日期", "op": "range", "lte": "2025-12-31"}, ("hr", "it")),
    ({"field": "created_at", "op": "range", "gte": "2025-01-10", "lte": "2025-06-01"}, ("hr", "it")),
    ({"field": "created_at", "op": "range", "gte": "2026-01-01"}, ("plain",)),
    ({"field": "created_at", "op": "eq", "value": "2025-08-08"}, ("texts",)),
    ({"field": "created_at", "op": "in", "value": ["2025-01-10", "2026-01-01"]}, ("hr", "plain")),
])
def test_ranges_of_numbers_and_dates(catalogue, given, expected):
    kb, docs = catalogue
    assert admitted(kb, given) == ids(docs, *expected)


def test_updated_at_is_a_date_field_too(catalogue):
    kb, docs = catalogue
    today = timezone.localdate().isoformat()
    assert admitted(kb, {"field": "updated_at", "op": "eq", "value": today}) == ids(docs, *docs)
    assert admitted(kb, {"field": "updated_at", "op": "range", "lte": "2000-01-01"}) == set()


def test_item_admits_documents_with_a_chunk_tagged_with_it_excluded_tags_aside(catalogue):
    kb, docs = catalogue
    assert admitted(kb, {"field": "item", "op": "eq", "value": "星河X3"}) == ids(docs, "hr")
    assert admitted(kb, {"field": "item", "op": "in", "value": ["星河X3", "星河S1"]}) == ids(docs, "hr", "plain")
    assert admitted(kb, {"field": "item", "op": "eq", "value": "星河X9"}) == set()


def test_an_excluded_tag_does_not_hide_another_chunk_that_is_about_the_item(catalogue):
    # given: the IT guide also has a chunk that really is about the router
    kb, docs = catalogue
    _tag(docs["it"], Item.objects.get(knowledge_base=kb, name="星河X3"), ordinal=1)
    # then
    assert admitted(kb, {"field": "item", "op": "eq", "value": "星河X3"}) == ids(docs, "hr", "it")


def test_every_filter_must_hold_and_document_ids_narrow_them(catalogue):
    kb, docs = catalogue
    pdf_or_docx = {"field": "file_type", "op": "in", "value": ["pdf", "docx"]}
    this_year = {"field": "生效日期", "op": "range", "gte": "2025-01-01"}
    assert admitted(kb, pdf_or_docx, this_year) == ids(docs, "hr")
    assert admitted(kb, pdf_or_docx, document_ids=[docs["it"].pk, docs["texts"].pk]) == ids(docs, "it")


def test_documents_outside_the_active_version_are_never_admitted(catalogue):
    # given: a draft-only document matching every filter below
    kb, docs = catalogue
    # when
    found = admitted(kb, {"field": "部门", "op": "eq", "value": "人力资源部"}, {"field": "file_type", "op": "eq", "value": "pdf"})
    # then
    assert found == ids(docs, "hr")
    assert not Document.objects.filter(pk__in=found, title="草稿手册").exists()


def test_a_draft_under_evaluation_is_filtered_on_its_own_documents(catalogue):
    kb, docs = catalogue
    draft = kb.versions.get(status="building")
    facts = DjangoRepository().ready_facts(
        kb_id=kb.pk, document_ids=None, version_id=draft.pk,
        filters=parse_filters([{"field": "部门", "op": "eq", "value": "人力资源部"}]), with_ids=True,
    )
    assert {Document.objects.get(pk=pk).title for pk in facts.ready_ids} == {"员工手册", "杂项", "草稿手册"}


def test_filters_that_admit_nothing_are_an_empty_answer_with_its_reason(catalogue):
    kb, docs = catalogue
    facts = DjangoRepository().ready_facts(
        kb_id=kb.pk, document_ids=None, filters=parse_filters([{"field": "部门", "op": "eq", "value": "财务部"}]),
    )
    assert facts.ready_ids == frozenset()
    assert facts.empty_reason == NO_DOCUMENT_MATCHES_FILTERS
    assert facts.before_filters == len(docs)


def test_several_knowledge_bases_apply_the_filters_in_each(catalogue, staff_user):
    # given: a second published base with one HR document and one other
    kb, docs = catalogue
    other = make_kb()
    hr_there = _document(other, title="考勤制度", attributes={"部门": "人力资源部"})
    finance = _document(other, title="报销", attributes={"部门": "财务部"})
    catalog_services.activate_version(version=make_ready_version(other, documents=[hr_there, finance]), actor=staff_user)
    # when
    facts = DjangoRepository().ready_facts_many(
        kb_ids=[kb.pk, other.pk], document_ids=None,
        filters=parse_filters([{"field": "部门", "op": "eq", "value": "人力资源部"}]), with_ids=True,
    )
    # then
    assert facts[kb.pk].ready_ids == frozenset(ids(docs, "hr", "odd"))
    assert facts[other.pk].ready_ids == frozenset({hr_there.pk})
    assert (facts[kb.pk].before_filters, facts[other.pk].before_filters) == (5, 2)


def test_unfiltered_facts_are_what_they_were(catalogue):
    kb, docs = catalogue
    facts = DjangoRepository().ready_facts(kb_id=kb.pk, document_ids=None, with_ids=True)
    assert facts.ready_ids == frozenset(ids(docs, *docs))
    assert facts.before_filters is None


def test_a_failed_document_is_not_admitted_whatever_its_metadata(catalogue):
    kb, docs = catalogue
    Document.objects.filter(pk=docs["hr"].pk).update(status=DocumentStatus.FAILED)
    assert admitted(kb, {"field": "部门", "op": "eq", "value": "人力资源部"}) == ids(docs, "odd")


# --- JSON in ---------------------------------------------------------------------------------------


def test_a_filter_reads_as_its_canonical_form():
    assert parse_filter({"field": "部门", "op": "eq", "value": " 人力资源部 "}) == MetadataFilter(
        field="attributes.部门", op="eq", value="人力资源部")
    assert parse_filter({"field": "file_type", "op": "in", "value": ["PDF", "pdf", "docx"]}) == MetadataFilter(
        field="file_type", op="in", value=("pdf", "docx"))
    assert parse_filter({"field": "生效日期", "op": "range", "gte": "2025-01-01", "lte": "2025-12-31"}).as_dict() == {
        "field": "attributes.生效日期", "op": "range", "gte": "2025-01-01", "lte": "2025-12-31"}
    assert parse_filters('{"field": "title", "op": "eq", "value": "员工手册"}') == (
        MetadataFilter(field="title", op="eq", value="员工手册"),)
    assert parse_filters("") == ()


@pytest.mark.parametrize("given,words", [
    ({"field": "部门", "op": "between", "value": 1}, "不认识的运算"),
    ({"field": "部门", "op": "eq"}, "缺少 value"),
    ({"field": "", "op": "eq", "value": "x"}, "缺少 field"),
    ({"field": "2025", "op": "eq", "value": "x"}, "不能只由数字组成"),
    ({"field": "部门", "op": "eq", "value": "x", "extra": 1}, "不认识的键"),
    ({"field": "部门", "op": "eq", "value": None}, "值只能是"),
    ({"field": "部门", "op": "eq", "value": {"a": 1}}, "值只能是"),
    ({"field": "部门", "op": "in", "value": []}, "非空列表"),
    ({"field": "部门", "op": "in", "value": "人力资源部"}, "非空列表"),
    ({"field": "部门", "op": "in", "value": list(range(51))}, "最多 50 个值"),
    ({"field": "title", "op": "range", "gte": "a"}, "不能按范围筛选"),
    ({"field": "item", "op": "eq", "value": 3}, "必须是文字"),
    ({"field": "生效日期", "op": "range"}, "至少需要 gte 或 lte"),
    ({"field": "生效日期", "op": "range", "gte": 1, "lte": "2025-01-01"}, "都是数字，或都是 ISO 日期"),
    ({"field": "生效日期", "op": "range", "gte": "2025-13-01"}, "不是 ISO 日期"),
    ({"field": "生效日期", "op": "range", "gte": "2025-12-31", "lte": "2025-01-01"}, "gte 大于 lte"),
    ({"field": "created_at", "op": "range", "gte": 5}, "都是数字，或都是 ISO 日期"),
    ({"field": "created_at", "op": "eq", "value": "昨天"}, "不是 ISO 日期"),
    ({"field": "生效日期", "op": "range", "value": "2025-01-01"}, "不用 value"),
    ({"field": "部门", "op": "eq", "value": "x", "gte": 1}, "只用于 range"),
    ("部门=人力资源部", "必须是对象"),
])
def test_a_bad_filter_is_refused_naming_it_and_the_problem(given, words):
    with pytest.raises(InvalidFilter) as raised:
        parse_filters([{"field": "title", "op": "eq", "value": "员工手册"}, given])
    assert raised.value.code == "invalid_filter"
    assert str(raised.value.message).startswith("第 2 个筛选条件：")
    assert words in str(raised.value.message)
    assert raised.value.extra == {"filter": 2}


def test_more_filters_than_allowed_or_no_list_at_all_is_refused():
    one = {"field": "title", "op": "eq", "value": "员工手册"}
    with pytest.raises(InvalidFilter, match=f"最多 {MAX_FILTERS} 个"):
        parse_filters([one] * (MAX_FILTERS + 1))
    with pytest.raises(InvalidFilter, match="JSON"):
        parse_filters("[{")
    with pytest.raises(InvalidFilter, match="列表"):
        parse_filters(42)


def test_a_scope_of_several_bases_that_the_filters_empty_says_so_without_searching(catalogue, staff_user):
    # given: two published bases, neither holding a finance document
    kb, docs = catalogue
    other = make_kb()
    catalog_services.activate_version(
        version=make_ready_version(other, documents=[_document(other, title="考勤制度", attributes={"部门": "人力资源部"})]),
        actor=staff_user,
    )
    store = FakeStore({})
    service = RetrievalService(repository=DjangoRepository(), embedder=FakeEmbedder(), store=store,
                               rewriter=FakeRewriter(None), reranker=None, cache=DjangoRetrievalCache())
    # when
    response = service.retrieve(RetrievalRequest(
        kb_id=kb.pk, also_kb_ids=(other.pk,), question="报销流程",
        filters=parse_filters([{"field": "部门", "op": "eq", "value": "财务部"}]),
    ))
    # then
    assert response.results == () and store.calls == []
    assert response.trace.empty_reason == NO_DOCUMENT_MATCHES_FILTERS
    assert [scope.empty_reason for scope in response.trace.knowledge_bases] == [NO_DOCUMENT_MATCHES_FILTERS] * 2
    assert (response.trace.filter_admitted_count, response.trace.filter_ready_count) == (0, 6)
