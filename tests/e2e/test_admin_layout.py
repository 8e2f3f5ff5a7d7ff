"""Admin lists fit a 1,400 px wide window: no column is cut off or pushed out of view."""

from __future__ import annotations

import pytest
from django.conf import settings

from knowledge.models import Document, DocumentStatus
from tests.conftest import make_document, make_kb
from tests.live import daphne_server, session_cookie_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_document_list_fits_1400_px_with_long_titles_and_errors(chromium, staff_user):
    # given: documents with the longest title, file name and error message the list shows
    kb = make_kb()
    kb.name = "客户服务与售后支持知识库（华东区域）"
    kb.save()
    for n in range(3):
        document = make_document(kb, status=DocumentStatus.FAILED, title="关于年度带薪休假、病假与事假申请流程的补充说明" * 3)
        Document.objects.filter(pk=document.pk).update(
            error_code="unsupported_encoding_or_corrupted_structure",
            error_message="无法解析该文件：结构损坏或使用了不支持的编码，请用 Office 另存为后重新上传。" * 2,
            source_tag=f"hr-policies-{n}",
        )
    cookie = session_cookie_for(staff_user)
    with daphne_server() as base_url:
        context = chromium.new_context(locale="zh-CN", viewport={"width": 1400, "height": 900})
        context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie[settings.SESSION_COOKIE_NAME], "url": base_url}])
        page = context.new_page()

        # when
        page.goto(f"{base_url}/admin/knowledge/document/")

        # then: the page does not scroll sideways and every column's header is inside the window
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        right_edges = page.evaluate(
            "Array.from(document.querySelectorAll('#result_list thead th')).map(th => th.getBoundingClientRect().right)"
        )
        spilling = page.evaluate(
            "Array.from(document.querySelectorAll('#result_list th, #result_list td'))"
            ".filter(cell => cell.scrollWidth > cell.clientWidth + 1).map(cell => cell.className)"
        )
        context.close()
    assert overflow <= 0
    assert right_edges and max(right_edges) <= 1400
    assert spilling == []  # no header or cell runs into its neighbour
