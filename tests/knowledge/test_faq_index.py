"""The FAQ question index in Milvus follows FAQ rows: create, edit, disable, delete."""

from __future__ import annotations

import pytest

from knowledge.faqs import services as faq_services
from knowledge.faqs.index import record_id
from knowledge.vectors import store_for
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db(transaction=True)


def faq_hits(kb, query: str) -> set[int]:
    store = store_for(kb)
    return {hit.document_id for hit in store.search_faq_sparse(kb_id=kb.pk, query=query, limit=10)}


def test_faq_index_follows_the_rows(milvus, run_tasks, staff_user):
    # given
    kb = make_kb()
    other_kb = make_kb()
    # when: created with a similar question
    faq = faq_services.save_faq(kb=kb, question="年假有几天？", similar_questions=["带薪休假天数"], answer="15 天", actor=staff_user)
    # then: both phrasings are searchable, only in their own knowledge base
    assert faq_hits(kb, "年假") == {faq.pk}
    assert faq_hits(kb, "带薪休假") == {faq.pk}
    assert faq_hits(other_kb, "年假") == set()
    # when: the similar question is edited away
    faq_services.save_faq(kb=kb, faq=faq, question="年假有几天？", similar_questions=[], answer="15 天", actor=staff_user)
    assert faq_hits(kb, "带薪休假") == set()
    # when: disabled, then re-enabled, then deleted
    faq_services.save_faq(kb=kb, faq=faq, question="年假有几天？", answer="15 天", enabled=False, actor=staff_user)
    assert faq_hits(kb, "年假") == set()
    faq_services.save_faq(kb=kb, faq=faq, question="年假有几天？", answer="15 天", enabled=True, actor=staff_user)
    assert faq_hits(kb, "年假") == {faq.pk}
    faq_services.delete_faq(faq=faq, actor=staff_user)
    assert faq_hits(kb, "年假") == set()


def test_record_ids_do_not_collide_between_faqs():
    assert record_id(1, 999) < record_id(2, 0)
