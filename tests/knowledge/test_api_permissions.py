"""Who may read and manage a knowledge base over the API, for each visibility and role."""

from __future__ import annotations

import pytest

from knowledge.models import Visibility
from tests.conftest import api_client_for, make_kb

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "member", "engineer", "staff"]

# visibility → roles that may read
READERS = {
    Visibility.PUBLIC: {"anonymous", "member", "engineer", "staff"},
    Visibility.INTERNAL: {"member", "engineer", "staff"},
    Visibility.RESTRICTED: {"engineer", "staff"},
}


@pytest.fixture
def clients(member_user, engineer_user, staff_user):
    return {
        "anonymous": api_client_for(None),
        "member": api_client_for(member_user),
        "engineer": api_client_for(engineer_user),
        "staff": api_client_for(staff_user),
    }


@pytest.mark.parametrize("visibility", list(READERS))
@pytest.mark.parametrize("role", ROLES)
def test_read_access_follows_visibility(clients, engineers_group, visibility, role):
    # given
    kb = make_kb(visibility=visibility, groups=[engineers_group])
    client = clients[role]
    # when
    detail = client.get(f"/api/knowledge-bases/{kb.slug}/")
    listing = client.get("/api/knowledge-bases/")
    # then
    listed = {item["id"] for item in listing.json()}
    if role in READERS[visibility]:
        assert detail.status_code == 200
        assert detail.json()["id"] == kb.slug
        assert kb.slug in listed
    else:
        # Not readable looks exactly like not existing.
        assert detail.status_code == 404
        assert detail.json()["code"] == "knowledge_base_not_found"
        assert kb.slug not in listed


@pytest.mark.parametrize("role", ["anonymous", "member", "engineer"])
def test_only_staff_manage(clients, engineers_group, staff_user, role):
    # given: a public KB with an active version, a ready v2, a failed document and a FAQ
    from django.core.files.uploadedfile import SimpleUploadedFile

    from knowledge import services
    from knowledge.models import FAQ, DocumentStatus, KnowledgeBaseVersion, VersionActivation
    from tests.conftest import make_document, make_ready_version

    kb = make_kb(visibility=Visibility.PUBLIC, groups=[engineers_group])
    v1 = make_ready_version(kb)
    services.activate_version(version=v1, actor=staff_user)
    make_ready_version(kb)
    failed = make_document(kb, status=DocumentStatus.FAILED)
    published = v1.documents.get()
    faq = services.save_faq(kb=kb, question="q", answer="a", actor=staff_user)
    client = clients[role]
    base = f"/api/knowledge-bases/{kb.slug}"
    # when
    responses = {
        "create kb": client.post("/api/knowledge-bases/", {"id": "new-kb", "name": "新"}, format="json"),
        "edit kb": client.patch(f"{base}/", {"name": "改名"}, format="json"),
        "reanalyse": client.post(f"{base}/reanalyse/"),
        "new draft": client.post(f"{base}/versions/", {}, format="json"),
        "activate": client.post(f"{base}/versions/2/activate/", {}, format="json"),
        "rollback": client.post(f"{base}/versions/1/rollback/", {}, format="json"),
        "mark ready": client.post(f"{base}/versions/2/mark-ready/"),
        "retire": client.post(f"{base}/versions/2/retire/"),
        "history": client.get(f"{base}/activations/"),
        "upload": client.post(f"{base}/documents/", {"files": [SimpleUploadedFile("a.md", b"# a")]}, format="multipart"),
        "delete document": client.delete(f"{base}/documents/{published.pk}/"),
        "retry": client.post(f"{base}/documents/{failed.pk}/retry/"),
        "new faq": client.post(f"{base}/faqs/", {"question": "q2", "answer": "a"}, format="json"),
        "edit faq": client.put(f"{base}/faqs/{faq.pk}/", {"question": "q", "answer": "b"}, format="json"),
        "patch faq": client.patch(f"{base}/faqs/{faq.pk}/", {"answer": "b"}, format="json"),
        "delete faq": client.delete(f"{base}/faqs/{faq.pk}/"),
        "invalidate": client.post("/api/admin/cache/invalidate", {"knowledge_base_id": kb.slug}, format="json"),
    }
    # then
    for action, response in responses.items():
        assert response.status_code in (401, 403), f"{action}: {response.status_code} {response.content[:200]}"
        assert response.json()["code"] in ("permission_denied", "not_authenticated"), action
    kb.refresh_from_db()
    assert kb.name != "改名" and kb.active_version == v1
    assert KnowledgeBaseVersion.objects.get(knowledge_base=kb, number=2).status == "ready"
    assert VersionActivation.objects.count() == 1
    assert FAQ.objects.get(pk=faq.pk).answer == "a"
    failed.refresh_from_db()
    assert failed.status == DocumentStatus.FAILED


def test_update_visibility_and_groups_changes_access_and_the_cache_epoch(clients, engineers_group, staff_user):
    # given
    from knowledge.models import CacheNamespace

    kb = make_kb(visibility=Visibility.INTERNAL)
    epoch = CacheNamespace.objects.get(knowledge_base=kb).cache_epoch
    assert clients["member"].get(f"/api/knowledge-bases/{kb.slug}/").status_code == 200
    # when
    response = clients["staff"].patch(
        f"/api/knowledge-bases/{kb.slug}/", {"visibility": "restricted", "allowed_groups": ["engineers"]}, format="json"
    )
    # then
    assert response.status_code == 200 and response.json()["allowed_groups"] == ["engineers"]
    assert clients["member"].get(f"/api/knowledge-bases/{kb.slug}/").status_code == 404
    assert clients["engineer"].get(f"/api/knowledge-bases/{kb.slug}/").status_code == 200
    assert CacheNamespace.objects.get(knowledge_base=kb).cache_epoch == epoch + 1


def test_staff_creates_and_updates_kb(clients):
    # when
    created = clients["staff"].post(
        "/api/knowledge-bases/",
        {"id": "hr-handbook", "name": "员工手册", "visibility": "restricted"},
        format="json",
    )
    updated = clients["staff"].patch("/api/knowledge-bases/hr-handbook/", {"name": "员工手册 2025"}, format="json")
    # then
    assert created.status_code == 201
    assert created.json()["embedding_model"] == "local-hash-lexical-v1"
    assert created.json()["embedding_dimension"] == 512
    assert created.json()["text_analysis"] == "terms-v1"
    assert updated.status_code == 200
    assert updated.json()["name"] == "员工手册 2025"


def test_staff_choose_the_model_and_dictionary_and_reanalyse(clients, milvus, run_tasks):
    # when
    created = clients["staff"].post(
        "/api/knowledge-bases/",
        {"id": "products", "name": "产品", "embedding_model": "local-e5-small-v1", "custom_terms": "星河云盘"},
        format="json",
    )
    edited = clients["staff"].patch("/api/knowledge-bases/products/", {"custom_terms": "星河云盘\nLX-9000"}, format="json")
    reanalysed = clients["staff"].post("/api/knowledge-bases/products/reanalyse/")

    # then
    assert created.status_code == 201, created.content
    assert (created.json()["embedding_model"], created.json()["embedding_dimension"]) == ("local-e5-small-v1", 384)
    assert edited.json()["custom_terms"] == "星河云盘\nLX-9000"
    assert reanalysed.status_code == 202


def test_an_embedding_model_the_deployment_cannot_serve_is_a_coded_error(clients):
    # when
    response = clients["staff"].post(
        "/api/knowledge-bases/", {"id": "remote", "name": "远程", "embedding_model": "text-embedding-v4"}, format="json"
    )

    # then
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_embedding_model"


def test_create_kb_validation_errors_are_coded(clients, kb):
    # when
    bad_slug = clients["staff"].post("/api/knowledge-bases/", {"id": "Bad Slug!", "name": "x"}, format="json")
    taken = clients["staff"].post("/api/knowledge-bases/", {"id": kb.slug, "name": "x"}, format="json")
    # then
    assert bad_slug.status_code == 400
    assert bad_slug.json()["code"] == "invalid_request"
    assert "id" in bad_slug.json()["errors"]
    assert taken.status_code == 409
    assert taken.json()["code"] == "slug_taken"


def test_readers_see_only_published_documents(clients, kb_with_active_version, staff_user):
    # given
    from knowledge import services
    from tests.conftest import make_document

    kb = kb_with_active_version
    kb.visibility = Visibility.INTERNAL
    kb.save()
    published = kb.active_version.documents.get()
    draft = services.create_draft_version(kb=kb, actor=staff_user)
    unpublished = make_document(kb)
    draft.documents.add(unpublished)
    # when
    member_list = clients["member"].get(f"/api/knowledge-bases/{kb.slug}/documents/").json()
    staff_list = clients["staff"].get(f"/api/knowledge-bases/{kb.slug}/documents/").json()
    hidden = clients["member"].get(f"/api/knowledge-bases/{kb.slug}/documents/{unpublished.pk}/")
    # then
    assert [d["id"] for d in member_list] == [published.pk]
    assert {d["id"] for d in staff_list} == {published.pk, unpublished.pk}
    assert hidden.status_code == 404


def test_token_authentication(staff_user, kb):
    # given
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    token = Token.objects.create(user=staff_user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    # when
    response = client.post(f"/api/knowledge-bases/{kb.slug}/versions/", {"label": "草稿"}, format="json")
    # then
    assert response.status_code == 201
    assert response.json()["status"] == "building"


def test_bad_token_is_401_with_code(kb):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = client.get("/api/knowledge-bases/")
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
