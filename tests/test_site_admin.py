"""ragsite/admin.py and ragsite/apps.py: admin pages outside our apps read in one language."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import translation

from ragsite.admin import permission_label

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_logged_in(client, staff_user):
    client.force_login(staff_user)
    return client


def test_default_permissions_are_labelled_in_chinese_from_their_codename():
    # given
    add_document = Permission.objects.get(codename="add_document", content_type__app_label="knowledge")

    # when
    label = permission_label(add_document)

    # then
    assert label == "知识库 | 文档 | 可以添加文档"


def test_permission_labels_follow_the_language():
    add_document = Permission.objects.get(codename="add_document", content_type__app_label="knowledge")
    with translation.override("en"):
        assert permission_label(add_document).endswith("Can add Document")


def test_the_group_page_picker_has_no_english_permission_names(admin_client_logged_in):
    # when
    page = admin_client_logged_in.get(reverse("admin:auth_group_add")).content.decode()

    # then
    assert "可以查看文档" in page
    assert "Can add" not in page and "Can view" not in page


def test_the_task_results_admin_is_named_in_chinese(admin_client_logged_in):
    # when
    index = admin_client_logged_in.get(reverse("admin:index")).content.decode()
    results = admin_client_logged_in.get(reverse("admin:django_tasks_database_dbtaskresult_changelist")).content.decode()

    # then
    assert "后台任务" in index and "Tasks Database Backend" not in index
    assert "任务结果" in results and "Task Result" not in results


def test_each_task_starts_with_an_empty_debug_query_log(settings, run_tasks):
    # given: DEBUG keeps every query, and a worker serves no request that would clear them
    from django.db import connection

    from knowledge.models import KnowledgeBase
    from knowledge.reanalysis import reanalyse_task

    settings.DEBUG = True
    for _ in range(20):
        list(KnowledgeBase.objects.all())
    assert len(connection.queries) >= 20

    # when: a task starts (reanalysing a KB that does not exist is a quick no-op)
    reanalyse_task.enqueue(kb_id=999_999)

    # then
    assert len(connection.queries) < 20
