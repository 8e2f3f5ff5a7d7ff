"""Versions over the API: list, create, activate, rollback, errors."""

from __future__ import annotations

import pytest

from knowledge.models import VersionActivation
from knowledge.catalog import services as catalog_services
from tests.conftest import make_ready_version

pytestmark = pytest.mark.django_db


def test_activate_and_rollback_over_api(staff_api, kb_with_active_version, staff_user):
    # given
    kb = kb_with_active_version
    v2 = make_ready_version(kb)
    # when
    activated = staff_api.post(f"/api/knowledge-bases/{kb.slug}/versions/{v2.number}/activate/", {"reason": "发布 v2"}, format="json")
    rolled_back = staff_api.post(f"/api/knowledge-bases/{kb.slug}/versions/1/rollback/", {"reason": "v2 有问题"}, format="json")
    history = staff_api.get(f"/api/knowledge-bases/{kb.slug}/activations/")
    versions = staff_api.get(f"/api/knowledge-bases/{kb.slug}/versions/")
    # then
    assert activated.status_code == 200
    assert activated.json()["to_version"] == 2
    assert rolled_back.status_code == 200
    assert rolled_back.json()["action"] == "rollback"
    assert rolled_back.json()["from_version"] == 2
    assert rolled_back.json()["actor"] == "staff"
    assert [row["reason"] for row in history.json()["results"]] == ["v2 有问题", "发布 v2", "首次发布"]
    assert {v["number"]: v["status"] for v in versions.json()["results"]} == {1: "active", 2: "ready"}


def test_activating_a_draft_is_a_coded_conflict(staff_api, kb):
    # given
    draft = staff_api.post(f"/api/knowledge-bases/{kb.slug}/versions/", {}, format="json").json()
    # when
    response = staff_api.post(f"/api/knowledge-bases/{kb.slug}/versions/{draft['number']}/activate/", {}, format="json")
    # then
    assert response.status_code == 409
    assert response.json()["code"] == "version_not_ready"
    assert "就绪" in response.json()["detail"]
    assert not VersionActivation.objects.exists()


def test_unknown_version_is_404(staff_api, kb):
    response = staff_api.post(f"/api/knowledge-bases/{kb.slug}/versions/42/activate/", {}, format="json")
    assert response.status_code == 404
    assert response.json()["code"] == "version_not_found"


def test_mark_ready_reports_pending_documents(staff_api, kb):
    # given
    from knowledge.models import DocumentStatus
    from tests.conftest import make_document

    draft = staff_api.post(f"/api/knowledge-bases/{kb.slug}/versions/", {}, format="json").json()
    from knowledge.models import KnowledgeBaseVersion

    KnowledgeBaseVersion.objects.get(knowledge_base=kb, number=draft["number"]).documents.add(
        make_document(kb, status=DocumentStatus.QUEUED)
    )
    # when
    response = staff_api.post(f"/api/knowledge-bases/{kb.slug}/versions/{draft['number']}/mark-ready/")
    # then
    assert response.status_code == 409
    assert response.json()["code"] == "documents_not_ready"


def test_openapi_schema_is_served(anonymous_api):
    response = anonymous_api.get("/api/schema/")
    assert response.status_code == 200
    assert b"/api/knowledge-bases/" in response.content


def test_errors_are_chinese_by_default_and_english_on_request(staff_api, kb):
    # given
    draft = staff_api.post(f"/api/knowledge-bases/{kb.slug}/versions/", {}, format="json").json()
    url = f"/api/knowledge-bases/{kb.slug}/versions/{draft['number']}/activate/"
    # when
    chinese = staff_api.post(url, {}, format="json")
    english = staff_api.post(url, {}, format="json", HTTP_ACCEPT_LANGUAGE="en")
    # then
    assert chinese.json()["code"] == english.json()["code"] == "version_not_ready"
    assert "只有就绪版本" in chinese.json()["detail"]
    assert "ready" in english.json()["detail"].lower() and "只有" not in english.json()["detail"]


def test_api_docs_load_without_a_cdn(anonymous_api):
    response = anonymous_api.get("/api/docs/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "cdn.jsdelivr.net" not in html and "unpkg.com" not in html
    assert "/static/drf_spectacular_sidecar/" in html


def test_rollback_endpoint_uses_the_version_in_the_url(staff_api, kb_with_two_published_versions, staff_user):
    kb = kb_with_two_published_versions
    catalog_services.activate_version(version=make_ready_version(kb), actor=staff_user)  # v3 active, v2 previous
    response = staff_api.post(f"/api/knowledge-bases/{kb.slug}/versions/1/rollback/", {"reason": "回到 v1"}, format="json")
    assert response.status_code == 200
    assert response.json()["to_version"] == 1
    kb.refresh_from_db()
    assert kb.active_version.number == 1


def test_the_release_check_limit_is_set_and_cleared_through_the_api(staff_api, kb):
    # when
    url = f"/api/knowledge-bases/{kb.slug}/"
    set_ = staff_api.patch(url, {"release_max_regression_points": 2.5}, format="json")
    kept = staff_api.patch(url, {"name": "改名"}, format="json")
    cleared = staff_api.patch(url, {"release_max_regression_points": None}, format="json")
    refused = staff_api.patch(url, {"release_max_regression_points": -1}, format="json")

    # then: a PATCH without the field keeps it; null clears it; a negative limit is refused
    assert set_.json()["release_max_regression_points"] == 2.5
    assert kept.json()["release_max_regression_points"] == 2.5
    assert cleared.json()["release_max_regression_points"] is None
    assert refused.status_code == 400
