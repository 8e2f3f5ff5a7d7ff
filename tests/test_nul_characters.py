"""A NUL character anywhere in a request is a clean 4xx. PostgreSQL text cannot hold one, so each
of these was a 500 there (found by tests/test_api_fuzz.py); SQLite merely found nothing."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_a_path_with_nul_is_not_found(staff_api, kb):
    # when
    response = staff_api.get("/api/knowledge-bases/a%00b/")
    # then
    assert response.status_code == 404 and response.json()["code"] == "not_found"


def test_a_query_parameter_with_nul_is_refused(staff_api, kb):
    # when
    response = staff_api.get("/api/chat/conversations", {"knowledge_base_id": "a\x00b"})
    # then
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"


def test_a_group_name_with_nul_is_no_group(staff_api, engineers_group):
    # when
    response = staff_api.post(
        "/api/knowledge-bases/", {"id": "kb-nul", "name": "n", "allowed_groups": ["engineers\x00"]}, format="json"
    )
    # then
    assert response.status_code == 400 and "allowed_groups" in response.json()["errors"]


def test_a_nul_in_a_text_field_is_refused_in_correct_chinese(staff_api, kb):
    # when: Django's validator refuses it, with our catalog's words over Django's own Chinese
    response = staff_api.patch(f"/api/knowledge-bases/{kb.slug}/", {"name": "手册\x00"}, format="json",
                               HTTP_ACCEPT_LANGUAGE="zh-hans")
    # then
    assert response.status_code == 400
    assert response.json()["errors"]["name"] == ["不能包含空字符（NUL）。"]
