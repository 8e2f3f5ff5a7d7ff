"""FAQs over the API: CRUD by staff, readers see enabled ones, every change moves the epoch."""

from __future__ import annotations

import pytest

from knowledge.models import FAQ, CacheNamespace, Visibility
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db


@pytest.fixture
def kb(db):
    return make_kb(visibility=Visibility.INTERNAL)


def epoch(kb) -> int:
    return CacheNamespace.objects.get(knowledge_base=kb).cache_epoch


def test_faq_crud_moves_the_cache_epoch(staff_api, kb):
    base = f"/api/knowledge-bases/{kb.slug}/faqs/"
    start = epoch(kb)
    # create
    created = staff_api.post(base, {"question": " 年假有几天？ ", "similar_questions": ["年假天数", " 年假天数 ", "年假有几天？"], "answer": "15 天"}, format="json")
    assert created.status_code == 201, created.content
    faq_id = created.json()["id"]
    assert created.json()["question"] == "年假有几天？"
    assert created.json()["similar_questions"] == ["年假天数"]  # trimmed and deduplicated, the standard question dropped
    # partial update keeps what it does not mention
    patched = staff_api.patch(f"{base}{faq_id}/", {"answer": "每年 15 天"}, format="json")
    assert patched.status_code == 200
    assert patched.json()["question"] == "年假有几天？" and patched.json()["similar_questions"] == ["年假天数"]
    assert patched.json()["answer"] == "每年 15 天"
    # full update
    put = staff_api.put(f"{base}{faq_id}/", {"question": "年假多少天？", "answer": "15 天", "enabled": False}, format="json")
    assert put.json()["enabled"] is False and put.json()["similar_questions"] == []
    # delete
    assert staff_api.delete(f"{base}{faq_id}/").status_code == 204
    assert not FAQ.objects.exists()
    assert epoch(kb) == start + 4


def test_faq_validation_and_duplicates(staff_api, kb):
    base = f"/api/knowledge-bases/{kb.slug}/faqs/"
    staff_api.post(base, {"question": "年假有几天？", "answer": "15 天"}, format="json")
    duplicate = staff_api.post(base, {"question": "年假有几天？", "answer": "另一个答案"}, format="json")
    blank = staff_api.post(base, {"question": "   ", "answer": "x"}, format="json")
    assert duplicate.status_code == 409 and duplicate.json()["code"] == "faq_duplicate"
    assert blank.status_code == 400


def test_readers_see_enabled_faqs_only(staff_api, member_api, kb):
    base = f"/api/knowledge-bases/{kb.slug}/faqs/"
    shown = staff_api.post(base, {"question": "公开的问题", "answer": "a"}, format="json").json()
    hidden = staff_api.post(base, {"question": "停用的问题", "answer": "b", "enabled": False}, format="json").json()
    assert [f["id"] for f in member_api.get(base).json()["results"]] == [shown["id"]]
    assert member_api.get(f"{base}{hidden['id']}/").status_code == 404
    assert member_api.get(f"{base}{shown['id']}/").status_code == 200
    assert member_api.patch(f"{base}{shown['id']}/", {"answer": "改"}, format="json").status_code == 403


def test_a_faq_is_not_reachable_through_another_knowledge_base(staff_api, kb):
    other = make_kb()
    faq = staff_api.post(f"/api/knowledge-bases/{other.slug}/faqs/", {"question": "别处的问题", "answer": "a"}, format="json").json()
    assert staff_api.get(f"/api/knowledge-bases/{kb.slug}/faqs/{faq['id']}/").status_code == 404
    assert staff_api.delete(f"/api/knowledge-bases/{kb.slug}/faqs/{faq['id']}/").status_code == 404
    assert FAQ.objects.filter(pk=faq["id"]).exists()
