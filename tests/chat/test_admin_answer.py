"""An answer on the trace page, rendered from its markdown in headless Chromium.

The page comes from the test client as staff; the browser gets it, and the static files it
names (the vendored marked and DOMPurify, `chat/admin_answer.js`), from a route that serves
them from the repository, so nothing but the renderer runs and nothing leaves the test.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse

from tests.chat.test_admin import SHEET_CITATION, answered_turn
from tests.e2e.conftest import chromium  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ORIGIN = "http://testserver"
ANSWER = (
    "星河X3 Pro 的保修：\n\n"
    "- 整机 **3 年**[来源 1](citation://1)\n"
    "- 配件 1 年[来源 9](citation://9)\n\n"
    "| 型号 | 保修 |\n| --- | --- |\n| 星河X3 Pro | 3年 |\n\n"
    "详见 [说明](https://evil.example/x) <img src=x onerror=\"window.__xss=1\"> ![图](asset://5) ![图](asset://77)"
)


@pytest.fixture
def rendered(chromium, client, staff_user, kb):  # noqa: F811  (the imported fixture)
    """The trace page of `ANSWER` after the browser ran its scripts: (page, requests)."""
    citation = {**SHEET_CITATION, "number": 1, "assets": [{"id": 5, "caption": "保修卡"}]}
    trace = answered_turn(kb, answer=ANSWER, citations=[citation])
    client.force_login(staff_user)
    path = reverse("admin:chat_querytrace_change", args=[trace.pk])
    html = client.get(path).content.decode()
    requests: list[str] = []

    def serve(route) -> None:
        url = urlparse(route.request.url)
        requests.append(url.path)
        if url.path == path:
            route.fulfill(status=200, content_type="text/html; charset=utf-8", body=html)
            return
        found = finders.find(url.path.removeprefix("/static/")) if url.path.startswith("/static/") else None
        if found:
            kind = "text/css" if found.endswith(".css") else "text/javascript"
            route.fulfill(status=200, content_type=kind, body=Path(found).read_bytes())
        else:
            route.fulfill(status=404, body="")

    context = chromium.new_context(locale="zh-CN")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.route("**/*", serve)
    page.goto(ORIGIN + path)
    page.locator("#trace-answer-text .chat-markdown").wait_for()
    yield page, requests
    context.close()
    assert errors == []


def test_answer_markdown_is_rendered_with_citations_as_badges(rendered):
    # given
    page, _requests = rendered
    answer = page.locator("#trace-answer-text .chat-markdown")
    # then: markdown becomes a list, emphasis and a table
    assert answer.locator("li").count() == 2
    assert answer.locator("strong").inner_text() == "3 年"
    assert answer.locator("table td").all_inner_texts() == ["星河X3 Pro", "3年"]
    # and: the answer's citation is a badge, a number it does not have stays text
    assert answer.locator("span.chat-cite").all_inner_texts() == ["来源 1"]
    assert "[来源 9]" in answer.inner_text()
    assert "citation://" not in answer.inner_text()


def test_answer_markdown_follows_nothing_and_runs_nothing(rendered):
    # given
    page, requests = rendered
    answer = page.locator("#trace-answer-text .chat-markdown")
    # then: no link at all; the address is shown in full
    assert answer.locator("a").count() == 0
    assert "https://evil.example/x" in answer.inner_text()
    # and: raw HTML is text, nothing ran, nothing was fetched from it
    assert '<img src=x onerror="window.__xss=1">' in answer.inner_text()
    assert page.evaluate("() => window.__xss") is None
    assert [r for r in requests if r.rsplit("/", 1)[-1] == "x"] == []
    # and: only the image of one of the answer's citations is shown
    assert [img.get_attribute("src") for img in answer.locator("img").all()] == ["/api/assets/5"]
