"""Admin pages and actions through the Django test client (staff only)."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from knowledge.models import (
    FAQ,
    Document,
    DocumentStatus,
    KnowledgeBase,
    KnowledgeBaseVersion,
    VersionActivation,
    VersionStatus,
)
from knowledge.catalog import readiness
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.faqs import services as faq_services
from tests.conftest import make_document, make_ready_version

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_logged_in(client, staff_user):
    client.force_login(staff_user)
    return client


ADMIN_PAGES = [
    "admin:knowledge_knowledgebase_changelist",
    "admin:knowledge_knowledgebase_add",
    "admin:knowledge_knowledgebaseversion_changelist",
    "admin:knowledge_versionactivation_changelist",
    "admin:knowledge_document_changelist",
    "admin:knowledge_document_upload",
    "admin:knowledge_document_queue",
    "admin:knowledge_chunk_changelist",
    "admin:knowledge_documentasset_changelist",
    "admin:knowledge_faq_changelist",
    "admin:knowledge_faq_add",
    "admin:knowledge_cachenamespace_changelist",
]


@pytest.mark.parametrize("name", ADMIN_PAGES)
def test_admin_pages_render_for_staff(admin_client_logged_in, kb_with_active_version, name):
    response = admin_client_logged_in.get(reverse(name))
    assert response.status_code == 200


@pytest.mark.parametrize("name", ADMIN_PAGES[:3])
def test_admin_is_staff_only(client, member_user, name):
    client.force_login(member_user)
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_create_kb_in_admin_goes_through_the_service(admin_client_logged_in):
    # when
    response = admin_client_logged_in.post(
        reverse("admin:knowledge_knowledgebase_add"),
        {"slug": "it-helpdesk", "name": "IT 服务台", "description": "", "support_contact": "分机 8000",
         "visibility": "internal", "chunk_size_tokens": 512, "chunk_overlap_tokens": 48},
    )
    # then
    assert response.status_code == 302, response.content.decode()[:2000]
    kb = KnowledgeBase.objects.get(slug="it-helpdesk")
    assert kb.embedding_model == "local-hash-lexical-v1"
    assert kb.cache_namespace.cache_epoch == 1


def test_the_new_kb_form_offers_the_embedding_models_and_creates_the_chosen_one(admin_client_logged_in):
    # given
    url = reverse("admin:knowledge_knowledgebase_add")
    # when
    page = admin_client_logged_in.get(url).content.decode()
    response = admin_client_logged_in.post(
        url, {"slug": "semantic", "name": "语义检索库", "description": "", "support_contact": "", "visibility": "internal",
              "chunk_size_tokens": 512, "chunk_overlap_tokens": 48, "embedding_choice": "local-e5-small-v1"},
    )
    # then: a choice in words, the deployment's default marked, no bare "-" for the model
    assert '<select name="embedding_choice"' in page
    assert "e5-small 多语言语义模型" in page and "384 维" in page and "（部署默认）" in page
    assert response.status_code == 302, response.content.decode()[:2000]
    kb = KnowledgeBase.objects.get(slug="semantic")
    assert (kb.embedding_model, kb.embedding_dimension) == ("local-e5-small-v1", 384)
    # and: the change form shows it fixed
    change = admin_client_logged_in.get(reverse("admin:knowledge_knowledgebase_change", args=[kb.pk])).content.decode()
    assert '<select name="embedding_choice"' not in change and "local-e5-small-v1" in change


def test_activate_action_asks_for_confirmation_then_records_reason_and_actor(admin_client_logged_in, kb, staff_user):
    # given
    version = make_ready_version(kb)
    url = reverse("admin:knowledge_knowledgebaseversion_changelist")
    # when: the first POST shows the confirmation page and changes nothing
    confirm_page = admin_client_logged_in.post(url, {"action": "activate", "_selected_action": [version.pk]})
    kb.refresh_from_db()
    assert confirm_page.status_code == 200
    assert "原因" in confirm_page.content.decode()
    assert kb.active_version is None
    # when: confirming without a reason is refused
    no_reason = admin_client_logged_in.post(url, {"action": "activate", "_selected_action": [version.pk], "confirm": "yes", "reason": ""})
    assert no_reason.status_code == 200
    assert not VersionActivation.objects.exists()
    # when: confirming with a reason switches
    done = admin_client_logged_in.post(url, {"action": "activate", "_selected_action": [version.pk], "confirm": "yes", "reason": "季度更新"}, follow=True)
    # then
    kb.refresh_from_db()
    assert kb.active_version == version
    activation = VersionActivation.objects.get()
    assert activation.reason == "季度更新"
    assert activation.actor == staff_user
    assert "已切换到 v1" in done.content.decode()


def test_the_publish_page_lists_the_documents_added_changed_and_removed(admin_client_logged_in, kb, staff_user):
    # given: v1 live with three documents
    url = reverse("admin:knowledge_knowledgebaseversion_changelist")
    kept, replaced, dropped = (make_document(kb, title=title) for title in ("保留的文档", "旧的报销制度", "下线的文档"))
    first = make_ready_version(kb, documents=[kept, replaced, dropped])
    first_page = admin_client_logged_in.post(url, {"action": "activate", "_selected_action": [first.pk]}).content.decode()
    catalog_services.activate_version(version=first, actor=staff_user, reason="上线")
    # and: a draft that re-uploads one file under its old name, drops one and adds one
    draft = catalog_services.create_draft_version(kb=kb, actor=staff_user)
    draft.documents.remove(replaced, dropped)
    newer = make_document(kb, title="新的报销制度")
    Document.objects.filter(pk=newer.pk).update(original_name=replaced.original_name)
    draft.documents.add(newer, make_document(kb, title="新增的文档"))
    readiness.mark_version_ready(version=draft)
    # when
    page = admin_client_logged_in.post(url, {"action": "activate", "_selected_action": [draft.pk]}).content.decode()
    # then: the first publish says so; the second names what readers gain, see changed and lose
    assert "首次发布" in first_page
    assert "与当前生效版本 v1 相比" in page
    assert "新增（1）：新增的文档" in page
    assert "更新（1）：新的报销制度" in page
    assert "移除（1）：下线的文档" in page
    assert "保留的文档" not in page


def test_rollback_action_from_kb_list(admin_client_logged_in, kb_with_two_published_versions):
    # given
    kb = kb_with_two_published_versions
    url = reverse("admin:knowledge_knowledgebase_changelist")
    # when
    admin_client_logged_in.post(url, {"action": "rollback_to_previous", "_selected_action": [kb.pk], "confirm": "yes", "reason": "回退"})
    # then
    kb.refresh_from_db()
    assert kb.active_version.number == 1
    assert VersionActivation.objects.filter(action="rollback", reason="回退").exists()


def test_activating_a_building_version_shows_the_error(admin_client_logged_in, kb, staff_user):
    # given


    draft = catalog_services.create_draft_version(kb=kb, actor=staff_user)
    url = reverse("admin:knowledge_knowledgebaseversion_changelist")
    # when
    response = admin_client_logged_in.post(url, {"action": "activate", "_selected_action": [draft.pk], "confirm": "yes", "reason": "试试"}, follow=True)
    # then
    assert "只有就绪版本可以发布或回滚" in response.content.decode()
    draft.refresh_from_db()
    assert draft.status == VersionStatus.BUILDING


def test_upload_page_accepts_many_files_into_the_draft(admin_client_logged_in, kb, media_root):
    # when
    response = admin_client_logged_in.post(
        reverse("admin:knowledge_document_upload"),
        {"knowledge_base": kb.pk, "source_tag": "hr",
         "files": [SimpleUploadedFile("a.md", "# 甲\n内容".encode()), SimpleUploadedFile("b.txt", "乙的内容".encode())]},
    )
    # then
    assert response.status_code == 302
    draft = KnowledgeBaseVersion.objects.get(knowledge_base=kb, status=VersionStatus.BUILDING)
    assert sorted(draft.documents.values_list("title", flat=True)) == ["a", "b"]
    assert set(Document.objects.values_list("source_tag", flat=True)) == {"hr"}


def test_upload_page_shows_validation_errors_and_stores_nothing(admin_client_logged_in, kb, media_root):
    # when
    response = admin_client_logged_in.post(
        reverse("admin:knowledge_document_upload"),
        {"knowledge_base": kb.pk, "files": [SimpleUploadedFile("fake.pdf", b"not a pdf at all")]},
    )
    # then
    assert response.status_code == 200
    assert response.content.decode().count("内容不是 PDF") == 1  # once, next to the file
    assert not Document.objects.exists()


def test_retry_and_delete_actions(admin_client_logged_in, kb, staff_user, django_capture_on_commit_callbacks, monkeypatch):
    # given
    from knowledge import cleanup


    monkeypatch.setattr(cleanup, "delete_document_vectors", lambda **kw: None)
    draft = catalog_services.create_draft_version(kb=kb, actor=staff_user)
    failed = make_document(kb, status=DocumentStatus.FAILED)
    doomed = make_document(kb)
    draft.documents.add(failed, doomed)
    url = reverse("admin:knowledge_document_changelist")
    # when
    admin_client_logged_in.post(url, {"action": "retry", "_selected_action": [failed.pk]})
    confirmation = admin_client_logged_in.post(url, {"action": "delete_documents", "_selected_action": [doomed.pk]})
    still_there = Document.objects.filter(pk=doomed.pk).exists()
    with django_capture_on_commit_callbacks(execute=True):
        admin_client_logged_in.post(url, {"action": "delete_documents", "_selected_action": [doomed.pk], "confirm": "yes"})
    # then: the first post only asked, saying what goes; the confirmed one deleted
    failed.refresh_from_db()
    assert failed.status == DocumentStatus.QUEUED
    assert confirmation.status_code == 200 and "彻底删除" in confirmation.content.decode() and still_there
    assert not Document.objects.filter(pk=doomed.pk).exists()


def test_retiring_a_version_asks_first_and_names_the_documents_that_go(admin_client_logged_in, kb, staff_user):
    # given: v1 holds a document no other version has; v2 is active
    only_v1 = make_document(kb, title="旧制度")
    v1 = make_ready_version(kb, documents=[only_v1])
    v2 = make_ready_version(kb)


    catalog_services.activate_version(version=v2, actor=staff_user)
    url = reverse("admin:knowledge_knowledgebaseversion_changelist")

    # when
    asked = admin_client_logged_in.post(url, {"action": "retire", "_selected_action": [v1.pk]})
    v1.refresh_from_db()
    status_after_asking = v1.status
    admin_client_logged_in.post(url, {"action": "retire", "_selected_action": [v1.pk], "confirm": "yes"})

    # then
    page = asked.content.decode()
    assert "旧制度" in page and "彻底删除只属于它的 1 个文档" in page
    assert status_after_asking == VersionStatus.READY
    v1.refresh_from_db()
    assert v1.status == VersionStatus.RETIRED
    assert not Document.objects.filter(pk=only_v1.pk).exists()


def test_faq_admin_saves_through_service_and_bumps_epoch(admin_client_logged_in, kb, django_capture_on_commit_callbacks):
    # given
    epoch = kb.cache_namespace.cache_epoch
    # when
    with django_capture_on_commit_callbacks(execute=False):
        response = admin_client_logged_in.post(
            reverse("admin:knowledge_faq_add"),
            {"knowledge_base": kb.pk, "question": "年假有多少天？", "similar_questions_text": "年假几天\n年休假天数",
             "answer": "每年 **15 天**。", "source_tag": "hr", "enabled": "on"},
        )
    # then
    assert response.status_code == 302
    faq = FAQ.objects.get()
    assert faq.similar_questions == ["年假几天", "年休假天数"]
    kb.cache_namespace.refresh_from_db()
    assert kb.cache_namespace.cache_epoch == epoch + 1


def test_document_change_view_is_read_only(admin_client_logged_in, kb):
    document = make_document(kb, status=DocumentStatus.FAILED)
    Document.objects.filter(pk=document.pk).update(error_code="pdf_encrypted", error_message="PDF 已加密")
    response = admin_client_logged_in.get(reverse("admin:knowledge_document_change", args=[document.pk]))
    assert response.status_code == 200
    assert "PDF 已加密" in response.content.decode()


def test_the_dictionary_is_edited_in_the_admin_and_the_reanalysis_action_runs_the_task(
    admin_client_logged_in, kb, django_capture_on_commit_callbacks, milvus, run_tasks
):
    # given
    epoch = kb.cache_namespace.cache_epoch
    change = reverse("admin:knowledge_knowledgebase_change", args=[kb.pk])

    # when
    edited = admin_client_logged_in.post(change, {
        "name": kb.name, "description": "", "support_contact": "", "visibility": kb.visibility,
        "custom_terms": "星河云盘\nLX-9000",
    })
    with django_capture_on_commit_callbacks(execute=True):
        acted = admin_client_logged_in.post(
            reverse("admin:knowledge_knowledgebase_changelist"),
            {"action": "reanalyse_with_dictionary", "_selected_action": [kb.pk]}, follow=True,
        )

    # then
    assert edited.status_code == 302, edited.content.decode()[:2000]
    kb.refresh_from_db()
    assert kb.dictionary_terms == ("星河云盘", "LX-9000")
    assert "按词典重建" in acted.content.decode()
    kb.cache_namespace.refresh_from_db()
    assert kb.cache_namespace.cache_epoch > epoch  # the task ran after commit
    page = admin_client_logged_in.get(change).content.decode()
    assert "terms-v1" in page and kb.embedding_model in page


@pytest.mark.django_db(transaction=True)
def test_deleting_a_published_kb_in_the_admin_confirms_then_purges_rows_files_and_vectors(
    admin_client_logged_in, milvus, run_tasks, media_root, staff_user
):
    # given: a published KB with a document and a FAQ, and another KB that must stay
    from engines.ports import DocumentFilter

    from knowledge.vectors import store_for
    from tests.conftest import make_kb

    doomed, kept = make_kb(), make_kb()
    for kb in (doomed, kept):
        document_services.upload_documents(kb=kb, files=[SimpleUploadedFile("a.md", "# 年假\n\n年假有十五天。".encode())], actor=None)
        catalog_services.activate_version(version=KnowledgeBaseVersion.objects.get(knowledge_base=kb), actor=staff_user)
    faq_services.save_faq(kb=doomed, question="年假几天", answer="十五天", actor=staff_user)
    original = Document.objects.get(knowledge_base=doomed).file.name
    assert (media_root / original).exists()
    url = reverse("admin:knowledge_knowledgebase_delete", args=[doomed.pk])

    def sparse_hits(kb):
        return store_for(kb).search_sparse(kb_id=kb.pk, query="年假", limit=5, documents=DocumentFilter(exclude=()))

    assert sparse_hits(doomed) and sparse_hits(kept)

    # when
    confirmation = admin_client_logged_in.get(url)
    deleted = admin_client_logged_in.post(url, {"post": "yes"})

    # then: the page said what goes; rows, file and vectors are gone; the other KB is intact
    page = confirmation.content.decode()
    assert confirmation.status_code == 200 and "1 个文档" in page and "1 条 FAQ" in page
    assert deleted.status_code == 302, deleted.content.decode()[:2000]
    assert not KnowledgeBase.objects.filter(pk=doomed.pk).exists()
    assert not Document.objects.filter(knowledge_base_id=doomed.pk).exists()
    assert not (media_root / original).exists()
    assert sparse_hits(doomed) == []
    assert sparse_hits(kept)


def test_the_document_list_says_which_versions_hold_each_document(admin_client_logged_in, kb, staff_user):
    # given: one document published and carried into the draft, one only in the draft, one in neither


    published, drafted, orphan = (make_document(kb, title=t) for t in ("已发布文档", "草稿文档", "游离文档"))
    catalog_services.activate_version(version=make_ready_version(kb, documents=[published]), actor=staff_user)
    draft = catalog_services.create_draft_version(kb=kb, actor=staff_user)
    draft.documents.add(drafted)

    # when
    page = admin_client_logged_in.get(reverse("admin:knowledge_document_changelist")).content.decode()

    # then
    def row(title):
        start = page.index(title)
        return page[start:page.index("</tr>", start)]

    assert "生效版本与草稿" in row("已发布文档")
    assert "仅草稿" in row("草稿文档")
    assert "不在生效版本或草稿中" in row("游离文档")


def test_the_queue_page_shows_waiting_running_failed_and_the_oldest_wait(admin_client_logged_in, kb):
    # given: two waiting (one for ten minutes), one running whose worker died, one failed
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    old, new = make_document(kb, status=DocumentStatus.QUEUED), make_document(kb, status=DocumentStatus.QUEUED)
    Document.objects.filter(pk=old.pk).update(status_changed_at=now - timedelta(minutes=10))
    Document.objects.filter(pk=new.pk).update(status_changed_at=now)
    stuck = make_document(kb, status=DocumentStatus.INDEXING, title="卡住的文档")
    Document.objects.filter(pk=stuck.pk).update(
        worker="host:4242", lease_expires_at=now - timedelta(seconds=5), heartbeat_at=now - timedelta(minutes=2),
        status_changed_at=now - timedelta(minutes=3),
    )
    make_document(kb, status=DocumentStatus.FAILED)

    # when
    page = admin_client_logged_in.get(reverse("admin:knowledge_document_queue")).content.decode()

    # then
    assert '<strong id="queue-waiting">2</strong>' in page
    assert '<strong id="queue-running">1</strong>' in page
    assert '<strong id="queue-failed">1</strong>' in page
    oldest = int(page.split('<strong id="queue-oldest">')[1].split(" s")[0])
    assert 595 <= oldest <= 660
    assert "卡住的文档" in page and "host:4242" in page and "已过期" in page


def test_a_table_chunk_is_shown_as_a_table_with_its_cells_escaped(admin_client_logged_in, kb):
    # given
    from knowledge.models import Chunk

    document = make_document(kb)
    chunk = Chunk.objects.create(
        document=document, knowledge_base=kb, ordinal=0, parent_id="p0", content_type="table", token_count=10,
        content="差旅标准\n| 城市 | 住宿 |\n| --- | --- |\n| 一线 | 600元/晚 |\n| <b>其他</b> | 400元/晚 |",
        locator={"page_start": 3},
    )

    # when
    page = admin_client_logged_in.get(reverse("admin:knowledge_chunk_change", args=[chunk.pk])).content.decode()

    # then
    assert '<table class="rag-chunk-table"><thead><tr><th>城市</th><th>住宿</th></tr></thead>' in page
    assert "<td>600元/晚</td>" in page and "| --- |" not in page
    assert "&lt;b&gt;其他&lt;/b&gt;" in page
    assert "第 3 页" in page


def test_the_document_page_shows_its_timeline_with_durations_attempts_and_workers(admin_client_logged_in, kb):
    # given: queued, claimed by a worker that died, claimed again, then failed
    from datetime import timedelta

    from django.utils import timezone

    from knowledge.models import DocumentTransition

    document = make_document(kb, status=DocumentStatus.FAILED)
    start = timezone.now() - timedelta(minutes=10)
    for offset, status, attempt, worker, code in [
        (0, "queued", None, "", ""), (2, "parsing", 1, "host-a:11", ""), (300, "queued", None, "", ""),
        (301, "parsing", 2, "host-b:22", ""), (303.5, "failed", 2, "host-b:22", "pdf_encrypted"),
    ]:
        DocumentTransition.objects.create(document=document, status=status, at=start + timedelta(seconds=offset),
                                          attempt=attempt, worker=worker, error_code=code)

    # when
    page = admin_client_logged_in.get(reverse("admin:knowledge_document_change", args=[document.pk])).content.decode()

    # then: each step with how long it lasted, the run and the worker
    timeline = page.split('class="rag-timeline"')[1].split("</table>")[0]
    assert timeline.count("<tr>") == 6  # header + five steps
    assert "2.0 s" in timeline and "5.0 min" in timeline and "2.5 s" in timeline
    assert "主机 host-a · 进程号 11" in timeline and "主机 host-b · 进程号 22" in timeline and "pdf_encrypted" in timeline
    assert "<th>处理进程</th>" in timeline and "host-a:11" not in timeline


def test_a_failed_document_has_a_retry_button_that_queues_it_with_fresh_attempts(admin_client_logged_in, kb, django_capture_on_commit_callbacks, database_tasks):
    # given
    document = make_document(kb, status=DocumentStatus.FAILED)
    Document.objects.filter(pk=document.pk).update(attempts=3, error_code="too_many_attempts")
    page = admin_client_logged_in.get(reverse("admin:knowledge_document_change", args=[document.pk])).content.decode()

    # when
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client_logged_in.post(reverse("admin:knowledge_document_retry", args=[document.pk]))

    # then
    document.refresh_from_db()
    assert 'id="rag-retry"' in page
    assert response.status_code == 302
    assert (document.status, document.attempts, document.error_code) == (DocumentStatus.QUEUED, 0, "")


def test_a_ready_document_has_no_retry_button_and_a_retry_post_changes_nothing(admin_client_logged_in, kb):
    # given
    document = make_document(kb, status=DocumentStatus.READY)

    # when
    page = admin_client_logged_in.get(reverse("admin:knowledge_document_change", args=[document.pk])).content.decode()
    response = admin_client_logged_in.post(reverse("admin:knowledge_document_retry", args=[document.pk]), follow=True)

    # then
    document.refresh_from_db()
    assert 'id="rag-retry"' not in page
    assert document.status == DocumentStatus.READY
    assert "只有失败的文档可以重试" in response.content.decode()
