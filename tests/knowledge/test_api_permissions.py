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
    listed = {item["id"] for item in listing.json()["results"]}
    if role in READERS[visibility]:
        assert detail.status_code == 200
        assert detail.json()["id"] == kb.slug
        assert kb.slug in listed
    else:
        # Not readable looks exactly like not existing.
        assert detail.status_code == 404
        assert detail.json()["code"] == "knowledge_base_not_found"
        assert kb.slug not in listed


@pytest.fixture
def plain_staff(db):
    """Staff that may sign in to the admin, with no role on any knowledge base."""
    from django.contrib.auth.models import User

    return User.objects.create_user("plain-staff", password="pw-plain-123", is_staff=True)


@pytest.mark.parametrize("role", ["anonymous", "member", "engineer", "plain_staff"])
def test_readers_and_plain_staff_manage_nothing(clients, engineers_group, staff_user, plain_staff, role):
    # given: a public KB with an active version, a ready v2, a failed document and a FAQ
    from django.core.files.uploadedfile import SimpleUploadedFile

    from knowledge.catalog import services as catalog_services
    from knowledge.faqs import services as faq_services
    from knowledge.models import FAQ, DocumentStatus, KnowledgeBaseVersion, VersionActivation
    from tests.conftest import make_document, make_ready_version

    kb = make_kb(visibility=Visibility.PUBLIC, groups=[engineers_group])
    v1 = make_ready_version(kb)
    catalog_services.activate_version(version=v1, actor=staff_user)
    make_ready_version(kb)
    failed = make_document(kb, status=DocumentStatus.FAILED)
    published = v1.documents.get()
    faq = faq_services.save_faq(kb=kb, question="q", answer="a", actor=staff_user)
    client = api_client_for(plain_staff) if role == "plain_staff" else clients[role]
    base = f"/api/knowledge-bases/{kb.slug}"
    # when
    responses = {
        "create kb": client.post("/api/knowledge-bases/", {"id": "new-kb", "name": "新"}, format="json"),
        "edit kb": client.patch(f"{base}/", {"name": "改名"}, format="json"),
        "reanalyse": client.post(f"{base}/reanalyse/"),
        "new draft": client.post(f"{base}/versions/", {}, format="json"),
        "activate": client.post(f"{base}/versions/2/activate/", {}, format="json"),
        "rollback": client.post(f"{base}/versions/1/rollback/", {}, format="json"),
        "retire": client.post(f"{base}/versions/2/retire/"),
        "history": client.get(f"{base}/activations/"),
        "upload": client.post(f"{base}/documents/", {"files": [SimpleUploadedFile("a.md", b"# a")]}, format="multipart"),
        "delete document": client.delete(f"{base}/documents/{published.pk}/"),
        "new faq": client.post(f"{base}/faqs/", {"question": "q2", "answer": "a"}, format="json"),
        "edit faq": client.put(f"{base}/faqs/{faq.pk}/", {"question": "q", "answer": "b"}, format="json"),
        "patch faq": client.patch(f"{base}/faqs/{faq.pk}/", {"answer": "b"}, format="json"),
        "delete faq": client.delete(f"{base}/faqs/{faq.pk}/"),
        "invalidate": client.post("/api/admin/cache/invalidate", {"knowledge_base_id": kb.slug}, format="json"),
        "retry": client.post(f"{base}/documents/{failed.pk}/retry/"),
        "mark ready": client.post(f"{base}/versions/2/mark-ready/"),
    }
    # then: refused with the role it takes
    for action, response in responses.items():
        assert response.status_code == 403, f"{action}: {response.status_code} {response.content[:200]}"
        assert response.json()["code"] in ("editor_required", "publisher_required", "create_knowledge_base_denied"), action
    kb.refresh_from_db()
    assert kb.name != "改名" and kb.active_version == v1
    assert KnowledgeBaseVersion.objects.get(knowledge_base=kb, number=2).status == "ready"
    assert VersionActivation.objects.count() == 1
    assert FAQ.objects.get(pk=faq.pk).answer == "a"
    failed.refresh_from_db()
    assert failed.status == DocumentStatus.FAILED


@pytest.fixture
def kb_with_roles(db, staff_user):
    """An internal KB with a published v1, a ready draft v2, editors and publishers groups."""
    from django.contrib.auth.models import Group, User

    from knowledge.catalog import services as catalog_services
    from tests.conftest import make_ready_version

    editors, publishers = Group.objects.create(name="kb-editors"), Group.objects.create(name="kb-publishers")
    kb = make_kb(visibility=Visibility.INTERNAL)
    catalog_services.update_knowledge_base(kb=kb, actor=None, editor_groups=[editors], publisher_groups=[publishers])
    catalog_services.activate_version(version=make_ready_version(kb), actor=staff_user, reason="v1")
    make_ready_version(kb)
    editor = User.objects.create_user("an-editor", password="pw-editor-123")
    editor.groups.add(editors)
    publisher = User.objects.create_user("a-publisher", password="pw-publisher-123")
    publisher.groups.add(publishers)
    return kb, api_client_for(editor), api_client_for(publisher)


def test_editors_prepare_drafts_but_only_publishers_publish(kb_with_roles):
    # given
    kb, editor, publisher = kb_with_roles
    base = f"/api/knowledge-bases/{kb.slug}"
    # when
    edited = editor.patch(f"{base}/", {"name": "编辑改名", "custom_terms": "星河X3"}, format="json")
    faq = editor.post(f"{base}/faqs/", {"question": "怎么报销？", "answer": "走 OA。"}, format="json")
    draft_seen = editor.get(f"{base}/versions/2/")
    refused = {
        "publish": editor.post(f"{base}/versions/2/activate/", {"reason": "上线"}, format="json"),
        "rollback": editor.post(f"{base}/versions/1/rollback/", {"reason": "回滚"}, format="json"),
        "retire": editor.post(f"{base}/versions/2/retire/"),
        "visibility": editor.patch(f"{base}/", {"visibility": "public"}, format="json"),
        "roles": editor.patch(f"{base}/", {"editor_groups": []}, format="json"),
        "gate": editor.patch(f"{base}/", {"release_max_regression_points": 50}, format="json"),
        "links": editor.patch(f"{base}/", {"link_allowed_hosts": ["evil.example"]}, format="json"),
        "web search": editor.patch(f"{base}/", {"web_search_enabled": True}, format="json"),
    }
    published = publisher.post(f"{base}/versions/2/activate/", {"reason": "上线"}, format="json")
    opened = publisher.patch(f"{base}/", {"visibility": "public"}, format="json")
    searching = publisher.patch(f"{base}/", {"web_search_enabled": True}, format="json")
    # then
    assert edited.status_code == 200 and edited.json()["role"] == "editor"
    assert faq.status_code == 201
    assert draft_seen.status_code == 200 and draft_seen.json()["status"] == "ready"
    for action, response in refused.items():
        assert response.status_code == 403, action
        assert response.json()["code"] == "publisher_required", action
    assert published.status_code == 200 and published.json()["to_version"] == 2
    assert opened.status_code == 200 and opened.json()["visibility"] == "public"
    assert searching.status_code == 200 and searching.json()["web_search_enabled"] is True
    kb.refresh_from_db()
    assert kb.active_version.number == 2 and kb.visibility == "public" and kb.web_search_enabled


def test_readers_do_not_see_drafts_notes_fingerprints_or_failures(kb_with_roles, member_user):
    # given: v2 is a ready draft with notes; a document failed in it
    from knowledge.models import KnowledgeBaseVersion
    from tests.conftest import make_document

    kb, editor, _ = kb_with_roles
    KnowledgeBaseVersion.objects.filter(knowledge_base=kb).update(notes="内部说明")
    failed = make_document(kb, status="failed")
    failed.error_message = "解析失败：/srv/secret/path.pdf"
    failed.save()
    reader = api_client_for(member_user)
    base = f"/api/knowledge-bases/{kb.slug}"
    # when
    versions = _items(reader.get(f"{base}/versions/"))
    draft = reader.get(f"{base}/versions/2/")
    active = reader.get(f"{base}/versions/1/").json()
    document = _items(reader.get(f"{base}/documents/"))[0]
    hidden_document = reader.get(f"{base}/documents/{failed.pk}/")
    kb_seen = reader.get(f"{base}/").json()
    editor_versions = _items(editor.get(f"{base}/versions/"))
    editor_document = editor.get(f"{base}/documents/{failed.pk}/").json()
    # then
    assert [v["number"] for v in versions] == [1]
    assert draft.status_code == 404
    assert active["notes"] is None and active["document_ids"]
    assert document["sha256"] is None and document["error_message"] is None and document["attempts"] is None
    assert hidden_document.status_code == 404
    assert kb_seen["role"] == "reader" and kb_seen["custom_terms"] is None and kb_seen["editor_groups"] is None
    assert {v["number"] for v in editor_versions} == {1, 2} and editor_versions[0]["notes"] == "内部说明"
    assert editor_document["error_message"] == "解析失败：/srv/secret/path.pdf" and editor_document["sha256"]


def test_creating_a_knowledge_base_needs_the_permission_and_a_publisher_group(db):
    # given
    from django.contrib.auth.models import Group, Permission, User

    creators = Group.objects.create(name="creators")
    creators.permissions.add(Permission.objects.get(codename="add_knowledgebase"))
    creator = User.objects.create_user("creator", password="pw-creator-123")
    creator.groups.add(creators)
    client = api_client_for(creator)
    # when
    without_group = client.post("/api/knowledge-bases/", {"id": "kb-a", "name": "甲"}, format="json")
    foreign_group = client.post(
        "/api/knowledge-bases/", {"id": "kb-b", "name": "乙", "publisher_groups": [Group.objects.create(name="x").name]},
        format="json",
    )
    created = client.post("/api/knowledge-bases/", {"id": "kb-c", "name": "丙", "publisher_groups": ["creators"]}, format="json")
    published = client.post("/api/knowledge-bases/kb-c/versions/", {}, format="json")
    # then
    assert without_group.status_code == 400 and without_group.json()["code"] == "publisher_group_required"
    assert foreign_group.status_code == 400 and foreign_group.json()["code"] == "publisher_group_required"
    assert created.status_code == 201 and created.json()["role"] == "publisher"
    assert created.json()["publisher_groups"] == ["creators"]
    assert published.status_code == 201


def _items(response) -> list:
    data = response.json()
    return data["results"] if isinstance(data, dict) and "results" in data else data


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
    from knowledge.catalog import services as catalog_services
    from tests.conftest import make_document

    kb = kb_with_active_version
    kb.visibility = Visibility.INTERNAL
    kb.save()
    published = kb.active_version.documents.get()
    draft = catalog_services.create_draft_version(kb=kb, actor=staff_user)
    unpublished = make_document(kb)
    draft.documents.add(unpublished)
    # when
    member_list = clients["member"].get(f"/api/knowledge-bases/{kb.slug}/documents/").json()["results"]
    staff_list = clients["staff"].get(f"/api/knowledge-bases/{kb.slug}/documents/").json()["results"]
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


def test_listing_knowledge_bases_costs_the_same_queries_for_two_or_twenty(db, engineers_group, engineer_user):
    # given: restricted knowledge bases the engineer reads, half of them also edits
    from django.db import connection
    from django.test.utils import CaptureQueriesContext


    from knowledge.catalog import services as catalog_services
    def queries_to_list(count: int) -> int:
        while (existing := engineers_group.knowledge_bases.count()) < count:
            kb = make_kb(visibility=Visibility.RESTRICTED, groups=[engineers_group])
            if existing % 2:
                catalog_services.update_knowledge_base(kb=kb, actor=None, editor_groups=[engineers_group])
        client = api_client_for(type(engineer_user).objects.get(pk=engineer_user.pk))  # no role cached yet
        with CaptureQueriesContext(connection) as captured:
            response = client.get("/api/knowledge-bases/")
        assert response.json()["count"] == count
        assert {item["role"] for item in response.json()["results"]} == {"reader", "editor"}
        return len(captured.captured_queries)

    # when
    few, many = queries_to_list(2), queries_to_list(20)
    # then: the roles come from the prefetched groups, not a query per row
    assert few == many


def test_publishers_set_the_hosts_whose_links_stay_clickable(kb_with_roles, member_user):
    # given
    kb, _editor, publisher = kb_with_roles
    url = f"/api/knowledge-bases/{kb.slug}/"
    # when
    fresh = publisher.get(url)
    allowed = publisher.patch(url, {"link_allowed_hosts": [" Docs.Example.com ", "*.corp.example", "docs.example.com"]},
                              format="json")
    refused = [publisher.patch(url, {"link_allowed_hosts": [entry]}, format="json")
               for entry in ("https://docs.example.com/", "docs.example.com/path", "*.", "user@docs.example.com")]
    seen_by_reader = api_client_for(member_user).get(url)
    # then: empty by default; stored as host names; anything else refused with the entry named
    assert fresh.json()["link_allowed_hosts"] == []
    assert allowed.status_code == 200, allowed.content
    assert allowed.json()["link_allowed_hosts"] == ["docs.example.com", "*.corp.example"]
    for response in refused:
        assert response.status_code == 400, response.content
        assert response.json()["code"] == "invalid_link_host"
    kb.refresh_from_db()
    assert kb.link_hosts == ("docs.example.com", "*.corp.example")
    # and: readers see which links of the answers they may follow
    assert seen_by_reader.json()["link_allowed_hosts"] == ["docs.example.com", "*.corp.example"]
