"""The admin under per-knowledge-base roles: editors prepare, publishers publish, nobody sees
another knowledge base's rows. (Which page answers whom is in tests/test_role_matrix.py.)"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from knowledge.catalog import services as catalog_services
from knowledge.models import KnowledgeBase, KnowledgeBaseVersion, VersionActivation, Visibility
from tests.conftest import make_kb, make_ready_version

pytestmark = pytest.mark.django_db


@pytest.fixture
def roles(db):
    """Two knowledge bases; `editor` edits the first, `publisher` publishes it, both are staff."""
    editors, publishers = Group.objects.create(name="editors"), Group.objects.create(name="publishers")
    mine = make_kb(slug="mine", visibility=Visibility.INTERNAL)
    catalog_services.update_knowledge_base(kb=mine, actor=None, name="我的知识库", editor_groups=[editors], publisher_groups=[publishers])
    theirs = make_kb(slug="theirs", visibility=Visibility.INTERNAL)
    catalog_services.update_knowledge_base(kb=theirs, actor=None, name="别人的知识库")
    users = {}
    for name, group in (("editor", editors), ("publisher", publishers)):
        users[name] = User.objects.create_user(name, password="pw-role-123", is_staff=True)
        users[name].groups.add(group)
    return mine, theirs, users


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_editor_cannot_publish_a_version_from_the_admin(roles):
    # given
    mine, _, users = roles
    version = make_ready_version(mine)
    url = reverse("admin:knowledge_knowledgebaseversion_changelist")
    # when
    refused = _signed_in(users["editor"]).post(
        url, {"action": "activate", "_selected_action": [version.pk], "confirm": "yes", "reason": "上线"}, follow=True
    )
    confirm = _signed_in(users["publisher"]).post(url, {"action": "activate", "_selected_action": [version.pk]})
    done = _signed_in(users["publisher"]).post(
        url, {"action": "activate", "_selected_action": [version.pk], "confirm": "yes", "reason": "上线"}, follow=True
    )
    # then
    assert "只有知识库的发布者可以进行此操作" in refused.content.decode()
    assert confirm.status_code == 200 and "原因" in confirm.content.decode()
    assert "已切换到 v1" in done.content.decode()
    assert VersionActivation.objects.get().actor == users["publisher"]


def test_an_editor_may_mark_ready_but_not_retire(roles):
    # given
    mine, _, users = roles
    ready = make_ready_version(mine)
    draft = catalog_services.create_draft_version(kb=mine, actor=None)
    url = reverse("admin:knowledge_knowledgebaseversion_changelist")
    client = _signed_in(users["editor"])
    # when
    client.post(url, {"action": "retire", "_selected_action": [ready.pk], "confirm": "yes"}, follow=True)
    marked = client.post(url, {"action": "mark_ready", "_selected_action": [draft.pk]}, follow=True)
    # then
    ready.refresh_from_db()
    assert ready.status == "ready"
    assert "还没有文档" in marked.content.decode() or "没有文档" in marked.content.decode()


def test_the_upload_form_offers_only_the_knowledge_bases_the_user_edits(roles):
    # given
    mine, theirs, users = roles
    client = _signed_in(users["editor"])
    url = reverse("admin:knowledge_document_upload")
    # when
    page = client.get(url).content.decode()
    foreign = client.post(url, {"knowledge_base": theirs.pk, "files": [SimpleUploadedFile("a.md", "# 标题\n\n正文".encode())]})
    # then
    assert "我的知识库" in page and "别人的知识库" not in page
    assert foreign.status_code == 200 and "knowledge_base" in foreign.context["form"].errors
    assert not theirs.documents.exists()


def test_an_editor_changes_the_dictionary_but_not_who_may_read(roles):
    # given
    mine, _, users = roles
    url = reverse("admin:knowledge_knowledgebase_change", args=[mine.pk])
    client = _signed_in(users["editor"])
    form = client.get(url)
    # when
    client.post(url, {
        "name": "我的知识库", "description": "", "support_contact": "", "custom_terms": "星河X3",
        "visibility": "public", "release_max_regression_points": "",
    })
    # then
    mine.refresh_from_db()
    assert 'name="visibility"' not in form.content.decode()
    assert 'name="link_allowed_hosts"' not in form.content.decode()
    assert mine.custom_terms == "星河X3" and mine.visibility == Visibility.INTERNAL
    assert mine.link_allowed_hosts == ""


def test_a_publisher_allows_the_hosts_whose_links_stay_clickable(roles):
    # given
    mine, _, users = roles
    url = reverse("admin:knowledge_knowledgebase_change", args=[mine.pk])
    client = _signed_in(users["publisher"])
    fields = {"name": "我的知识库", "description": "", "support_contact": "", "custom_terms": "",
              "visibility": "internal", "release_max_regression_points": ""}
    # when
    form = client.get(url).content.decode()
    refused = client.post(url, {**fields, "link_allowed_hosts": "https://docs.example.com/x"})
    saved = client.post(url, {**fields, "link_allowed_hosts": "Docs.Example.com\n*.corp.example\n"})
    # then
    assert 'name="link_allowed_hosts"' in form
    assert refused.status_code == 200 and "link_allowed_hosts" in refused.context["adminform"].form.errors
    assert saved.status_code == 302
    mine.refresh_from_db()
    assert mine.link_hosts == ("docs.example.com", "*.corp.example")


def test_a_creator_must_make_one_of_their_groups_publisher(db):
    # given
    creators = Group.objects.create(name="creators")
    creators.permissions.add(Permission.objects.get(codename="add_knowledgebase"))
    creator = User.objects.create_user("creator", password="pw-creator-123", is_staff=True)
    creator.groups.add(creators)
    client = _signed_in(creator)
    url = reverse("admin:knowledge_knowledgebase_add")
    fields = {"slug": "new-kb", "name": "新知识库", "visibility": "internal", "chunk_size_tokens": 512,
              "chunk_overlap_tokens": 48, "description": "", "support_contact": "", "custom_terms": ""}
    # when
    refused = client.post(url, fields)
    created = client.post(url, {**fields, "publisher_groups": [creators.pk]})
    # then
    assert refused.status_code == 200 and "publisher_groups" in refused.context["adminform"].form.errors
    assert created.status_code == 302
    kb = KnowledgeBase.objects.get(slug="new-kb")
    assert list(kb.publisher_groups.all()) == [creators]
    assert client.get(reverse("admin:knowledge_knowledgebase_change", args=[kb.pk])).status_code == 200


def test_the_ingestion_queue_lists_only_the_users_knowledge_bases(roles):
    # given
    from tests.conftest import make_document

    mine, theirs, users = roles
    make_document(mine, status="queued", title="我的文档")
    make_document(theirs, status="queued", title="别人的文档")
    # when
    page = _signed_in(users["editor"]).get(reverse("admin:knowledge_document_queue")).content.decode()
    # then
    assert "我的知识库" in page and "别人的知识库" not in page
    assert KnowledgeBaseVersion.objects.filter(knowledge_base=theirs).count() == 0


def test_the_admin_asks_for_a_role_once_per_page_not_once_per_model(roles, django_assert_max_num_queries):
    # given: an editor; the index and a list ask every model admin for its permissions
    _, _, users = roles
    client = _signed_in(users["editor"])
    # when / then: 80 and 53 queries when each model asked the database again
    with django_assert_max_num_queries(10):
        assert client.get(reverse("admin:index")).status_code == 200
    with django_assert_max_num_queries(14):
        assert client.get(reverse("admin:knowledge_faq_changelist")).status_code == 200


def test_an_image_whose_file_is_gone_is_a_404_in_the_admin(roles, media_root):
    # given: an asset row whose bytes the storage lost
    from django.core.files.base import ContentFile

    from knowledge.models import DocumentAsset
    from tests.conftest import make_document

    mine, _, users = roles
    asset = DocumentAsset(document=make_document(mine), sha256="cd" * 32)
    asset.file.save("a.jpg", ContentFile(b"\xff\xd8\xff"), save=False)
    asset.save()
    asset.file.storage.delete(asset.file.name)
    client = Client(raise_request_exception=False)
    client.force_login(users["editor"])
    # when
    response = client.get(reverse("admin:knowledge_documentasset_image", args=[asset.pk]))
    # then
    assert response.status_code == 404
