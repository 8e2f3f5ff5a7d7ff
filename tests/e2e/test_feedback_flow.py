"""A reader's 👎 on the chat page reaches the release check: the reader rates an answer in
Chromium, staff turn it into an evaluation question on the admin page, and a draft that drops
the document holding the right answer is refused at publish through the API."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from chat.models import AnswerFeedback
from evaluation.models import EvalCase
from knowledge.models import Chunk, Document, KnowledgeBaseVersion, Visibility
from tests.chat.conftest import RAG_QUESTION, live_chat_server, publish_kb, session_cookie_for
from tests.conftest import api_client_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "e2e"
TIMEOUT_MS = 30_000


@pytest.fixture
def kb_that_blocks_regressions(milvus, run_tasks, media_root, staff_user):
    """An internal knowledge base, published, whose publishing refuses any drop on the release check."""
    kb = publish_kb(actor=staff_user, visibility=Visibility.INTERNAL)
    response = api_client_for(staff_user).patch(f"/api/knowledge-bases/{kb.slug}/", {"release_max_regression_points": 0},
                                                format="json")
    assert response.status_code == 200, response.content
    return kb


def browser_page(chromium, base_url: str, user):
    context = chromium.new_context(locale="zh-CN", viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    context.add_cookies([{"name": name, "value": value, "url": base_url} for name, value in session_cookie_for(user).items()])
    return context, context.new_page()


def test_a_down_vote_on_the_chat_page_becomes_a_case_that_blocks_a_regressed_release(
        kb_that_blocks_regressions, staff_user, member_user, chromium):
    kb = kb_that_blocks_regressions
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with live_chat_server() as base_url:
        # given: the member asks on the chat page
        context, page = browser_page(chromium, base_url, member_user)
        page.goto(f"{base_url}/?kb={kb.slug}")
        page.wait_for_selector("html[data-chat-ready]")
        page.fill("#question", RAG_QUESTION)
        page.press("#question", "Enter")
        answer = page.locator("li.msg.assistant").first
        answer.locator(".confidence-badge").wait_for()

        # when: 👎, then what was wrong
        answer.locator('.feedback-button[data-verdict="down"]').click()
        answer.locator(".feedback-reason input").wait_for()
        answer.locator(".feedback-reason input").fill("没说保修从哪天算起")
        with page.expect_response(lambda r: "/feedback" in r.url and r.request.method == "PUT") as sent:
            answer.locator(".feedback-reason button").click()
        assert sent.value.ok
        expect(answer.locator(".feedback-note")).to_have_text("感谢反馈！")

        # then: stored, and shown pressed after a reload
        feedback = AnswerFeedback.objects.get()
        assert (feedback.verdict, feedback.reason, feedback.user_id) == ("down", "没说保修从哪天算起", member_user.pk)
        page.reload()
        page.wait_for_selector("html[data-chat-ready]")
        expect(page.locator('li.msg.assistant .feedback-button[data-verdict="down"]')).to_have_attribute("aria-pressed", "true")
        page.screenshot(path=str(ARTIFACTS / "feedback-chat-page.png"))
        context.close()

        # when: staff open the 👎 list and turn it into a question, marking the product chunk
        context, page = browser_page(chromium, base_url, staff_user)
        page.goto(f"{base_url}/admin/chat/answerfeedback/?verdict__exact=down")
        expect(page.locator("#result_list")).to_contain_text("没说保修从哪天算起")
        page.get_by_role("link", name="转为评测问题").click()
        product_chunk = Chunk.objects.get(document__knowledge_base=kb, document__title="产品手册", content__contains="星河X3 的保修期")
        page.locator(f'input[name="right"][value="{product_chunk.pk}"]').check()
        page.screenshot(path=str(ARTIFACTS / "feedback-case-page.png"))
        page.get_by_role("button", name="保存评测问题").click()
        expect(page.locator(".messagelist")).to_contain_text("下次上线检查会评测它")
        context.close()

    # then: the question is in the (new) default set
    case = EvalCase.objects.get()
    assert (case.question, case.expected_chunks, case.eval_set.is_default) == (RAG_QUESTION, [product_chunk.pk], True)

    # when: through the API, a draft drops the product manual, and the publisher tries to publish it
    staff = api_client_for(staff_user)
    manual = Document.objects.get(knowledge_base=kb, title="产品手册")
    assert staff.delete(f"/api/knowledge-bases/{kb.slug}/documents/{manual.pk}/").status_code == 200
    draft = KnowledgeBaseVersion.objects.get(knowledge_base=kb, status="ready")
    refused = staff.post(f"/api/knowledge-bases/{kb.slug}/versions/{draft.number}/activate/", {"reason": "上线"}, format="json")

    # then: the release check measured the reader's question and refuses the loss
    assert refused.status_code == 409 and refused.json()["code"] == "release_check_blocked", refused.content
