"""Staff's metadata on documents (`Document.attributes`): set at upload (API and admin), replaced
by `PATCH …/documents/{id}/` and on the admin's document page, checked the same way everywhere,
shown in the API and the admin, one audit entry per change and a new cache epoch."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from knowledge.attributes import InvalidAttributes, clean_attributes
from knowledge.documents import services as document_services
from knowledge.models import AuditAction, AuditEntry, CacheNamespace, Document
from tests.conftest import make_document

pytestmark = pytest.mark.django_db

HR = {"部门": "人力资源部", "生效日期": "2025-01-01", "密级": 2, "公开": True, "地区": ["华东", "华南"]}


def detail_url(kb, document) -> str:
    return f"/api/knowledge-bases/{kb.slug}/documents/{document.pk}/"


def upload(client, kb, *files, **extra):
    return client.post(f"/api/knowledge-bases/{kb.slug}/documents/", {"files": list(files), **extra}, format="multipart")


def audit_rows(kb) -> list[tuple[str, str]]:
    return list(AuditEntry.objects.filter(knowledge_base=kb).order_by("pk").values_list("action", "target"))


def epoch_of(kb) -> int:
    return CacheNamespace.objects.filter(knowledge_base=kb).values_list("cache_epoch", flat=True).first() or 1


@pytest.fixture
def ready_document(kb):
    return make_document(kb, title="员工手册")


@pytest.fixture
def admin_client_logged_in(client, staff_user):
    client.force_login(staff_user)
    return client


# --- the rules -----------------------------------------------------------------------------------


def test_attributes_are_kept_as_given_with_texts_trimmed_and_list_repeats_dropped():
    assert clean_attributes({"部门": " 人力资源部 ", "地区": ["华东", "华东 ", "华南"], "密级": 2.5, "公开": False}) == {
        "部门": "人力资源部", "地区": ["华东", "华南"], "密级": 2.5, "公开": False}
    assert clean_attributes('{"部门": "人力资源部"}') == {"部门": "人力资源部"}
    assert clean_attributes("") == {} and clean_attributes({}) == {}


@pytest.mark.parametrize("given,words", [
    ([1, 2], "必须是 JSON 对象"),
    ("{not json", "必须是 JSON 对象"),
    ({"": "x"}, "键不能为空"),
    ({" 部门": "x"}, "首尾不能有空格"),
    ({"键" * 65: "x"}, "过长（最多 64 个字符）"),
    ({"2025": "x"}, "不能只由数字组成"),
    ({'a"b': "x"}, "不能包含引号"),
    ({"部门": None}, "只能是文字、数字、true/false 或文字列表"),
    ({"部门": {"名称": "人力资源部"}}, "只能是文字、数字、true/false 或文字列表"),
    ({"部门": ""}, "不能为空"),
    ({"部门": "人力\x00资源部"}, "控制字符"),
    ({"部门": "长" * 501}, "过长（最多 500 个字符）"),
    ({"地区": ["华东", 3]}, "只能包含文字"),
    ({"地区": [f"区{i}" for i in range(21)]}, "最多 20 项"),
    ({"密级": float("nan")}, "有限的数字"),
    ({f"键{i}": i for i in range(51)}, "最多 50 个键"),
    ({f"键{i}": "值" * 400 for i in range(30)}, "元数据过大"),
])
def test_attributes_that_do_not_fit_are_refused_saying_why(given, words):
    with pytest.raises(InvalidAttributes) as raised:
        clean_attributes(given)
    assert raised.value.code == "invalid_attributes"
    assert words in str(raised.value.message)


# --- upload ----------------------------------------------------------------------------------------


def test_an_api_upload_gives_its_attributes_to_every_new_document(staff_api, kb, media_root):
    # given: one file already there, with attributes of its own
    first = upload(staff_api, kb, SimpleUploadedFile("旧.txt", "旧的内容".encode()),
                   attributes=json.dumps({"部门": "行政部"}, ensure_ascii=False)).json()[0]["document"]
    # when
    response = upload(staff_api, kb, SimpleUploadedFile("新.txt", "新的内容".encode()),
                      SimpleUploadedFile("旧.txt", "旧的内容".encode()), attributes=json.dumps(HR, ensure_ascii=False))
    # then
    assert response.status_code == 201, response.content
    new, old = (outcome["document"] for outcome in response.json())
    assert new["attributes"] == HR
    assert old["id"] == first["id"] and old["attributes"] == {"部门": "行政部"}
    assert Document.objects.get(pk=new["id"]).attributes == HR


def test_an_upload_with_bad_attributes_stores_nothing(staff_api, kb, media_root):
    response = upload(staff_api, kb, SimpleUploadedFile("a.txt", "内容".encode()), attributes='{"部门": {"x": 1}}')
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_attributes"
    assert "部门" in response.json()["detail"]
    assert not Document.objects.exists()
    assert not (media_root.exists() and any(p.is_file() for p in media_root.rglob("*")))


def test_the_admin_upload_page_takes_attributes(admin_client_logged_in, kb, media_root):
    # when
    response = admin_client_logged_in.post(reverse("admin:knowledge_document_upload"), {
        "knowledge_base": kb.pk, "attributes": json.dumps(HR, ensure_ascii=False),
        "files": [SimpleUploadedFile("a.md", "# 甲\n内容".encode())],
    })
    refused = admin_client_logged_in.post(reverse("admin:knowledge_document_upload"), {
        "knowledge_base": kb.pk, "attributes": '{"2025": "x"}', "files": [SimpleUploadedFile("b.md", "# 乙\n内容".encode())],
    })
    # then
    assert response.status_code == 302
    assert Document.objects.get(title="a").attributes == HR
    assert refused.status_code == 200
    assert "键“2025”不能只由数字组成。" in refused.content.decode()
    assert not Document.objects.filter(title="b").exists()


# --- PATCH ---------------------------------------------------------------------------------------


def test_patch_replaces_the_attributes_logs_it_and_moves_the_cache_epoch(staff_api, kb, ready_document):
    # given
    epoch = epoch_of(kb)
    # when
    response = staff_api.patch(detail_url(kb, ready_document), {"attributes": HR}, format="json")
    # then
    assert response.status_code == 200, response.content
    assert response.json()["attributes"] == HR
    assert Document.objects.get(pk=ready_document.pk).attributes == HR
    assert audit_rows(kb)[-1] == (AuditAction.DOCUMENT_ATTRIBUTES_UPDATED, "员工手册：公开、地区、密级、生效日期、部门")
    assert epoch_of(kb) == epoch + 1
    assert staff_api.get(detail_url(kb, ready_document)).json()["attributes"] == HR


def test_patch_names_only_the_keys_that_changed_and_an_unchanged_patch_logs_nothing(staff_api, kb, ready_document):
    # given
    staff_api.patch(detail_url(kb, ready_document), {"attributes": HR}, format="json")
    rows = len(audit_rows(kb))
    # when
    staff_api.patch(detail_url(kb, ready_document), {"attributes": {**HR, "密级": 3, "地区": ["华东"]}}, format="json")
    unchanged = staff_api.patch(detail_url(kb, ready_document), {"attributes": {**HR, "密级": 3, "地区": ["华东"]}}, format="json")
    cleared = staff_api.patch(detail_url(kb, ready_document), {"attributes": {}}, format="json")
    # then
    assert unchanged.status_code == 200 and cleared.json()["attributes"] == {}
    assert audit_rows(kb)[rows:] == [
        (AuditAction.DOCUMENT_ATTRIBUTES_UPDATED, "员工手册：地区、密级"),
        (AuditAction.DOCUMENT_ATTRIBUTES_UPDATED, "员工手册：公开、地区、密级、生效日期、部门"),
    ]


@pytest.mark.parametrize("body,code", [
    ({"attributes": {"部门": ["人力资源部", {"x": 1}]}}, "invalid_attributes"),
    ({"attributes": [["部门", "人力资源部"]]}, "invalid_attributes"),
    ({"attributes": {"键" * 70: 1}}, "invalid_attributes"),
    ({"attributes": {"部门\ud800": "x"}}, "invalid_attributes"),
    ({"attributes": {"部门": "人力\ud800"}}, "invalid_attributes"),
    ({"attributes": None}, "invalid_request"),
])
def test_a_bad_patch_is_a_clear_400_and_changes_nothing(staff_api, kb, ready_document, body, code):
    # Sent as ASCII JSON: a lone surrogate travels escaped, as a client's encoder writes it.
    response = staff_api.patch(detail_url(kb, ready_document), json.dumps(body), content_type="application/json")
    assert (response.status_code, response.json()["code"]) == (400, code)
    assert Document.objects.get(pk=ready_document.pk).attributes == {}
    assert not AuditEntry.objects.filter(action=AuditAction.DOCUMENT_ATTRIBUTES_UPDATED).exists()


def test_a_patch_without_attributes_changes_nothing(staff_api, kb, ready_document):
    response = staff_api.patch(detail_url(kb, ready_document), {}, format="json")
    assert (response.status_code, response.json()["attributes"]) == (200, {})
    assert not AuditEntry.objects.filter(action=AuditAction.DOCUMENT_ATTRIBUTES_UPDATED).exists()


def test_readers_see_the_attributes_but_may_not_change_them(member_api, staff_api, kb_with_active_version):
    # given: a published document with metadata
    kb = kb_with_active_version
    ready_document = kb.active_version.documents.get()
    staff_api.patch(detail_url(kb, ready_document), {"attributes": HR}, format="json")
    assert member_api.get(detail_url(kb, ready_document)).json()["attributes"] == HR
    refused = member_api.patch(detail_url(kb, ready_document), {"attributes": {}}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (403, "editor_required")
    assert Document.objects.get(pk=ready_document.pk).attributes == HR


# --- the admin's document page -----------------------------------------------------------------------


def change_form(attributes: str) -> dict:
    """The document page's POST: its one field and the (empty) images inline's management form."""
    return {"attributes": attributes, "assets-TOTAL_FORMS": "0", "assets-INITIAL_FORMS": "0",
            "assets-MIN_NUM_FORMS": "0", "assets-MAX_NUM_FORMS": "1000"}


def test_the_document_page_edits_the_attributes_through_the_service(admin_client_logged_in, kb, ready_document):
    # given
    url = reverse("admin:knowledge_document_change", args=[ready_document.pk])
    epoch = epoch_of(kb)
    # when
    response = admin_client_logged_in.post(url, change_form(json.dumps(HR, ensure_ascii=False)))
    # then
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Document.objects.get(pk=ready_document.pk).attributes == HR
    assert audit_rows(kb)[-1][0] == AuditAction.DOCUMENT_ATTRIBUTES_UPDATED
    assert epoch_of(kb) == epoch + 1
    page = admin_client_logged_in.get(url).content.decode()
    assert "人力资源部" in page and "\\u" not in page.split('name="attributes"')[1][:400]
    listing = admin_client_logged_in.get(reverse("admin:knowledge_document_changelist")).content.decode()
    assert "公开=true；地区=华东、华南；密级=2…" in listing
    log = admin_client_logged_in.get(reverse("admin:knowledge_auditentry_changelist")).content.decode()
    assert "修改文档元数据" in log


@pytest.mark.parametrize("attributes,words", [
    ("{not json", "元数据必须是 JSON 对象"),
    ('["部门"]', "元数据必须是 JSON 对象"),
    ('{"部门": null}', "键“部门”的值只能是文字、数字、true/false 或文字列表。"),
    ('{"2025": "x"}', "键“2025”不能只由数字组成。"),
])
def test_the_document_page_says_what_is_wrong_in_words(admin_client_logged_in, kb, ready_document, attributes, words):
    url = reverse("admin:knowledge_document_change", args=[ready_document.pk])
    response = admin_client_logged_in.post(url, change_form(attributes))
    assert response.status_code == 200
    assert words in response.content.decode()
    assert Document.objects.get(pk=ready_document.pk).attributes == {}
    assert not AuditEntry.objects.filter(action=AuditAction.DOCUMENT_ATTRIBUTES_UPDATED).exists()


def test_the_service_refuses_bad_attributes_whoever_calls_it(kb, ready_document, staff_user):
    with pytest.raises(InvalidAttributes):
        document_services.set_document_attributes(document=ready_document, attributes={"x": [1]}, actor=staff_user)
    assert Document.objects.get(pk=ready_document.pk).attributes == {}
