"""The admin document list updates live while a worker ingests (no page reload)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

from knowledge.documents import services as document_services
from knowledge.documents.bulk import process_queue_until_done
from knowledge.models import DocumentStatus
from tests.conftest import make_kb
from tests.live import daphne_server, session_cookie_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_document_status_cells_follow_ingestion_live(chromium, staff_user, milvus, database_tasks, media_root):
    # given: a queued document and a staff member watching the admin list
    kb = make_kb()
    document = document_services.upload_documents(
        kb=kb, actor=staff_user, files=[SimpleUploadedFile("年假制度.md", "# 年假\n\n每年 15 天带薪年假。".encode())]
    )[0].document
    assert document.status == DocumentStatus.QUEUED
    cookie = session_cookie_for(staff_user)
    with daphne_server() as base_url:
        context = chromium.new_context(locale="zh-CN")
        context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie[settings.SESSION_COOKIE_NAME], "url": base_url}])
        page = context.new_page()
        page.goto(f"{base_url}/admin/knowledge/document/?knowledge_base__id__exact={kb.pk}")
        cell = page.locator(f'[data-doc-status="{document.pk}"]')
        assert cell.inner_text() == "排队中"
        page.wait_for_function("document.getElementById('rag-live-state').textContent.includes('已连接')")
        page.evaluate("window.__notReloaded = true")
        # when: the worker processes the queue (here, in the test process)
        process_queue_until_done([document.pk], timeout=60)
        # then: the cell changes in place
        page.wait_for_function(
            f"document.querySelector('[data-doc-status=\"{document.pk}\"]').textContent === '就绪'", timeout=15000
        )
        assert page.evaluate("window.__notReloaded") is True
        row = page.locator("tr", has=cell)
        assert row.locator(".field-chunks").inner_text() == "1"
        assert row.locator(".field-attempts").inner_text() == "1"  # it read 0 until a reload
        context.close()
