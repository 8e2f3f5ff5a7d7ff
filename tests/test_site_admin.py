"""ragsite/admin.py and ragsite/apps.py: admin pages outside our apps read in one language."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import translation

from django_tasks_db.models import DBTaskResult, get_date_max

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


def test_the_permission_picker_leaves_out_the_product_internal_event_log(admin_client_logged_in):
    # when
    page = admin_client_logged_in.get(reverse("admin:auth_group_add")).content.decode()

    # then: the live-status event tables have no permission staff could mean to grant
    assert "Django_Eventstream" not in page and "event counter" not in page
    assert "可以修改FAQ" in page


def test_a_task_is_listed_by_what_it_does_and_to_what(admin_client_logged_in):
    # given: an ingestion batch and an FAQ indexing job, as the worker left them
    ingest = DBTaskResult.objects.create(
        task_path="knowledge.documents.ingestion.runner.ingest_documents_task", args_kwargs={"args": [], "kwargs": {"document_ids": [7, 9]}},
        queue_name="ingestion", backend_name="default", run_after=get_date_max(), status="SUCCESSFUL",
        return_value={"documents": [{"document_id": 7, "status": "ready"}]}, worker_ids=["worker-a"],
    )
    DBTaskResult.objects.create(
        task_path="knowledge.faqs.index.index_faqs", args_kwargs={"args": [], "kwargs": {"kb_id": 1, "faq_ids": [3]}},
        queue_name="ingestion", backend_name="default", run_after=get_date_max(),
    )

    # when
    listing = admin_client_logged_in.get(reverse("admin:django_tasks_database_dbtaskresult_changelist")).content.decode()
    page = admin_client_logged_in.get(reverse("admin:django_tasks_database_dbtaskresult_change", args=[ingest.pk])).content.decode()

    # then: named in words, filtered by queue in words, the raw JSON folded away
    assert "文档入库" in listing and "文档 7、9" in listing and "FAQ 索引" in listing and "知识库 1；FAQ 3" in listing
    assert "ingest_documents_task" not in listing and "index_faqs" not in listing
    assert "文档处理" in listing and ">ingestion<" not in listing
    assert "文档入库 · 文档 7、9" in page and "DBTaskResult object" not in page
    assert "<details><summary>原始数据</summary>" in page and "9999" not in page
    assert "Run after" not in page and "Traceback" not in page


def test_the_two_box_picker_and_the_index_headers_speak_chinese(admin_client_logged_in):
    # when: the admin's script catalog and the index page, in the default language
    script = admin_client_logged_in.get(reverse("admin:jsi18n")).content.decode()
    catalog = json.loads(re.search(r"const newcatalog = (\{.*?\});", script, re.S).group(1))
    index = admin_client_logged_in.get(reverse("admin:index")).content.decode()

    # then: the strings Django's own Chinese catalog lacks are ours
    assert catalog["Choose all %s"] == "全部选择%s"
    assert catalog['Choose %s by selecting them and then select the "Choose" arrow button.'] == "选中要加入的%s，再点击“选择”箭头。"
    assert "Model name" not in index and "模型名称" in index


def test_each_task_starts_with_an_empty_debug_query_log(settings, run_tasks):
    # given: DEBUG keeps every query, and a worker serves no request that would clear them
    from django.db import connection

    from knowledge.models import KnowledgeBase
    from knowledge.documents.reanalysis import reanalyse_task

    settings.DEBUG = True
    for _ in range(20):
        list(KnowledgeBase.objects.all())
    assert len(connection.queries) >= 20

    # when: a task starts (reanalysing a KB that does not exist is a quick no-op)
    reanalyse_task.enqueue(kb_id=999_999)

    # then
    assert len(connection.queries) < 20
