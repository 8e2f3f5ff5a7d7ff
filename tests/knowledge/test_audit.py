"""Every write a service makes to a knowledge base leaves one audit entry naming who and what."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.urls import reverse

from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.faqs import services as faq_services
from knowledge.models import AuditAction, AuditEntry, Document, DocumentStatus
from ragsite.errors import Conflict
from tests.conftest import make_document, make_kb

pytestmark = pytest.mark.django_db


def entries(kb) -> list[tuple[str, str, str | None]]:
    return [
        (e.action, e.target, e.actor.username if e.actor else None)
        for e in AuditEntry.objects.filter(knowledge_base=kb).order_by("pk")
    ]


def test_each_write_is_logged_with_its_actor_and_object(kb, staff_user, media_root):
    # given: a staff member at work on a knowledge base
    start = AuditEntry.objects.count()

    # when
    catalog_services.update_knowledge_base(kb=kb, actor=staff_user, name="人事制度", support_contact="分机 8100")
    document_services.upload_documents(kb=kb, actor=staff_user, files=[SimpleUploadedFile("年假.md", "# 年假\n\n十五天。".encode())])
    faq = faq_services.save_faq(kb=kb, actor=staff_user, question="年假几天？", answer="十五天。")
    faq_services.save_faq(kb=kb, actor=staff_user, faq=faq, question="年假有几天？", answer="十五天。")
    faq_services.delete_faq(faq=faq, actor=staff_user)
    catalog_services.invalidate_cache(kb=kb, actor=None)
    catalog_services.update_knowledge_base(kb=kb, actor=staff_user, name="人事制度", description=kb.description)

    # then: one entry per write, in order, with what it touched; a save that changed nothing
    # (the last) leaves none
    assert entries(kb)[-7:] == [
        (AuditAction.KB_UPDATED, "名称、人工支持联系方式", "staff"),
        (AuditAction.DRAFT_CREATED, "v1", "staff"),
        (AuditAction.DOCUMENTS_UPLOADED, "1 个文件：年假.md", "staff"),
        (AuditAction.FAQ_CREATED, "年假几天？", "staff"),
        (AuditAction.FAQ_UPDATED, "年假有几天？", "staff"),
        (AuditAction.FAQ_DELETED, "年假有几天？", "staff"),
        (AuditAction.CACHE_CLEARED, "", None),  # a command: the operator, named by nobody
    ]
    assert AuditEntry.objects.count() == start + 7


def test_a_refused_write_leaves_no_entry(kb, staff_user):
    # given
    faq_services.save_faq(kb=kb, actor=staff_user, question="报销流程？", answer="走 OA。")
    before = entries(kb)

    # when: the same question again is refused, inside a transaction that rolls back
    with pytest.raises(Conflict), transaction.atomic():
        faq_services.save_faq(kb=kb, actor=staff_user, question="报销流程？", answer="另一个答案。")

    # then
    assert entries(kb) == before


def test_retry_and_delete_are_logged(kb_with_active_version, staff_user, media_root):
    # given: a failed document in the draft
    kb = kb_with_active_version
    failed = make_document(kb, status=DocumentStatus.FAILED, title="损坏的报销单")

    # when
    document_services.retry_document(document=failed, actor=staff_user)
    catalog_services.delete_document(document=Document.objects.get(pk=failed.pk), actor=staff_user)

    # then: deleting edits the draft, which is created for it
    assert entries(kb)[-3:] == [
        (AuditAction.DOCUMENT_RETRIED, "损坏的报销单", "staff"),
        (AuditAction.DRAFT_CREATED, "v2", "staff"),
        (AuditAction.DOCUMENT_DELETED, "损坏的报销单", "staff"),
    ]


def test_a_deleted_knowledge_base_keeps_its_entries_for_superusers_only(client, staff_user):
    # given: a base with a history, then deleted; an editor of another base
    kb = make_kb(slug="old-kb")
    faq_services.save_faq(kb=kb, actor=staff_user, question="旧问题？", answer="旧答案。")
    catalog_services.delete_knowledge_base(kb=kb, actor=staff_user)
    editors = Group.objects.create(name="编辑组")
    editor = User.objects.create_user("editor", password="pw-audit-123", is_staff=True)
    editor.groups.add(editors)
    other = make_kb(slug="other-kb")
    catalog_services.update_knowledge_base(kb=other, actor=None, editor_groups=[editors])

    # when
    client.force_login(staff_user)
    as_superuser = client.get(reverse("admin:knowledge_auditentry_changelist")).content.decode()
    client.force_login(editor)
    as_editor = client.get(reverse("admin:knowledge_auditentry_changelist")).content.decode()

    # then: the entries outlive the base, named by its identifier, and stay out of other editors' view
    kept = AuditEntry.objects.filter(knowledge_base_slug="old-kb").order_by("pk")
    assert [e.action for e in kept][-2:] == [AuditAction.FAQ_CREATED, AuditAction.KB_DELETED]
    assert all(e.knowledge_base_id is None for e in kept)
    assert "old-kb（已删除）" in as_superuser and "旧问题？" in as_superuser
    assert "old-kb" not in as_editor and "旧问题？" not in as_editor
    assert "other-kb" in as_editor


def test_an_upload_logs_the_files_it_wrote_or_queued_again_and_nothing_else(kb, staff_user, media_root):
    # given: a file uploaded once, then failed
    upload = lambda: SimpleUploadedFile("报销.md", "# 报销\n\n三十天内提交。".encode())  # noqa: E731
    document = document_services.upload_documents(kb=kb, actor=staff_user, files=[upload()])[0].document
    Document.objects.filter(pk=document.pk).update(status=DocumentStatus.FAILED)
    before = len(entries(kb))

    # when: the same bytes again (how people retry), then once more while it is queued
    document_services.upload_documents(kb=kb, actor=staff_user, files=[upload()])
    document_services.upload_documents(kb=kb, actor=staff_user, files=[upload()])

    # then: the retry is logged by its file name; the no-op is not
    assert entries(kb)[before:] == [(AuditAction.DOCUMENTS_UPLOADED, "1 个文件：报销.md", "staff")]
