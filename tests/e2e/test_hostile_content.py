"""Hostile content in headless Chromium: the chat page and the admin pages that show
documents, chunks, FAQs, traces, conversations and hit-test results of a knowledge base whose
documents and FAQ carry HTML / JS, fake citations and images (see
`tests/chat/test_hostile_content.py` for the payloads and the server-side checks).

Every payload would set `window.__xss` if it ran. Each page is checked for: the trap unset, no
dialog, no script error, no request to anything but this server (nor to the `x` of
`<img src=x>`), no element with an event-handler attribute or a `javascript:` URL, and the
payload visible as text. The chat page's Content-Security-Policy is bypassed here: these tests
are about the renderer, which must be safe without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from django.contrib.auth.models import AnonymousUser
from django.urls import reverse

from chat.contracts import ChatQuery, Requester
from chat.models import Conversation, Message, MessageRole, MessageStatus, QueryTrace
from chat.pipeline.rag import RAGService
from knowledge.models import FAQ, Chunk, Document
from tests.chat.conftest import live_chat_server
from tests.chat.test_hostile_content import (  # noqa: F401  (hostile_kb is a fixture)
    ALLOWED_LINK,
    BIDI,
    CONTACT_QUESTION,
    FAQ_QUESTION,
    HOSTILE_TITLE,
    IMG_ONERROR,
    LINK_HOST,
    LINKS_LINE,
    LINKS_QUESTION,
    RAG_QUESTION,
    SCRIPT,
    SHOWN_ADDRESSES,
    hostile_kb,
    obeying_answer,
)
from tests.live import session_cookie_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "e2e"
TIMEOUT_MS = 30_000

# Everything on the page that could run or navigate: event-handler attributes and script URLs.
# An element's own attribute list, read through the prototype: a form with a field named
# "attributes" (the document form has one) shadows `form.attributes` with that field.
ACTIVE_MARKUP = (
    "() => { const own = Object.getOwnPropertyDescriptor(Element.prototype, 'attributes').get;"
    " return [...document.querySelectorAll('*')].filter(e => [...own.call(e)].some("
    "a => a.name.startsWith('on') || /^\\s*(javascript|vbscript|data):/i.test(a.value))).map(e => e.outerHTML.slice(0, 120)); }"
)
# The text a reader sees, form fields included (the admin shows editable FAQs in textareas).
VISIBLE_TEXT = (
    "() => document.body.innerText + '\\n' + [...document.querySelectorAll('input, textarea')]"
    ".map(e => e.value).join('\\n')"
)


@dataclass
class Watched:
    page: Any
    base_url: str
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def assert_inert(self) -> None:
        page = self.page
        assert page.evaluate("() => window.__xss") is None
        assert self.dialogs == []
        assert self.errors == []
        assert [u for u in self.requests if urlparse(u).hostname != "127.0.0.1"] == []
        # `<img src=x>` would be a request to this very server.
        assert [u for u in self.requests if urlparse(u).path.rsplit("/", 1)[-1] in ("x", "a.png", "b.png")] == []
        assert page.evaluate(ACTIVE_MARKUP) == []
        assert page.locator("script:not([src]):not([type='application/json'])").count() == 0
        assert page.locator("iframe, svg[onload], object, embed").count() == 0

    def visible_text(self) -> str:
        return self.page.evaluate(VISIBLE_TEXT)


@pytest.fixture
def browse(chromium, request) -> Iterator[Callable[..., Watched]]:
    """A fresh browser context per page set, with every request, dialog and error recorded."""
    contexts: list[tuple[Any, Watched]] = []

    def open_(base_url: str, *, cookies: dict[str, str] | None = None) -> Watched:
        context = chromium.new_context(locale="zh-CN", viewport={"width": 1280, "height": 900}, bypass_csp=True)
        context.set_default_timeout(TIMEOUT_MS)
        if cookies:
            context.add_cookies([{"name": k, "value": v, "url": base_url} for k, v in cookies.items()])
        page = context.new_page()
        watched = Watched(page, base_url)
        page.on("request", lambda r: watched.requests.append(r.url))
        page.on("dialog", lambda d: (watched.dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: watched.errors.append(str(e)))
        contexts.append((context, watched))
        return watched

    yield open_
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for index, (context, watched) in enumerate(contexts):
        watched.page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-{index + 1}.png"), full_page=True)
        context.close()


def ask(watched: Watched, question: str):
    page = watched.page
    index = page.locator("li.msg.assistant").count()
    page.fill("#question", question)
    page.press("#question", "Enter")
    answer = page.locator("li.msg.assistant").nth(index)
    answer.locator(".confidence-badge").wait_for()
    return answer


def open_every_source(watched: Watched, answer) -> list[str]:
    """Open each source of an answer in the side panel: the panel texts."""
    page = watched.page
    shown = []
    for chip in answer.locator(".source-chip").all():
        chip.click()
        page.locator("#source-panel").wait_for(state="visible")
        shown.append(page.locator("#source-title").inner_text() + "\n" + page.locator("#source-text").inner_text())
    return shown


def assert_chat_answer_clean(answer, *, numbers: set[str]) -> None:
    cited = {b.get_attribute("data-cite") for b in answer.locator(".answer button[data-cite]").all()}
    assert cited <= numbers
    assert answer.locator(".answer img").count() == 0  # the hostile documents have no images
    assert answer.locator(".sources a").count() == 0  # sources and their titles are text
    # Links only to the knowledge base's allowed host (a click away, never fetched by the page).
    for link in answer.locator(".answer a").all():
        assert urlparse(link.get_attribute("href")).hostname == LINK_HOST, link.get_attribute("href")
        assert link.get_attribute("rel") == "noopener noreferrer nofollow"


# --- the chat page --------------------------------------------------------------------------------


def test_chat_page_shows_answers_from_hostile_documents_and_faqs_as_text(hostile_kb, browse):
    with live_chat_server() as base_url:
        watched = browse(base_url)
        page = watched.page
        page.goto(f"{base_url}/?kb={hostile_kb.slug}")
        page.wait_for_selector("html[data-chat-ready]")

        # when: a question answered from the document carrying HTML and JS
        answer = ask(watched, RAG_QUESTION)
        # then: the markup is there as text, and its sources open as text
        assert SCRIPT in answer.locator(".answer").inner_text()
        numbers = {b.get_attribute("data-cite") for b in answer.locator(".source-chip").all()}
        assert_chat_answer_clean(answer, numbers=numbers)
        panels = open_every_source(watched, answer)
        assert any(SCRIPT in text for text in panels)
        assert any("[来源 9](citation://9)" in text for text in panels)  # the fake marker, as text
        watched.assert_inert()

        # when: the source whose link runs script, and the HTML page whose entities became tags
        for question, shown in ((CONTACT_QUESTION, "javascript:window.__xss=1"), ("访客餐厅在哪里？", IMG_ONERROR)):
            answer = ask(watched, question)
            numbers = {b.get_attribute("data-cite") for b in answer.locator(".source-chip").all()}
            assert_chat_answer_clean(answer, numbers=numbers)
            assert any(shown in text for text in open_every_source(watched, answer)), question
            watched.assert_inert()
        assert '<a href="javascript：window.__xss=1">点击查看</a>' in page.locator("#messages").inner_text()

        # when: the document uploaded under a title full of markup
        answer = ask(watched, "访客车辆停放在哪里？")
        numbers = {b.get_attribute("data-cite") for b in answer.locator(".source-chip").all()}
        assert_chat_answer_clean(answer, numbers=numbers)
        panels = open_every_source(watched, answer)
        assert any(HOSTILE_TITLE in text and '<svg onload="window.__xss=1"></svg>' in text for text in panels)
        watched.assert_inert()

        # when: the source whose text hides a right-to-left override ("txt.exe" reading "exe.txt")
        answer = ask(watched, "访客可以进入机房吗？")
        panels = open_every_source(watched, answer)
        # then: the answer has none, and the source shows where it was instead of obeying it
        assert "访客不得进入机房" in answer.locator(".answer").inner_text()
        assert any("访客须知\ufffdtxt.exe\ufffd：" in text for text in panels)
        assert BIDI not in page.locator("body").inner_text()
        # and: the source's long line wraps inside the panel
        assert any("W" * 1000 in text for text in panels)
        assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
        assert page.evaluate("(p => p.scrollWidth - p.clientWidth)(document.getElementById('source-text'))") <= 0
        watched.assert_inert()

        # when: the FAQ whose curated answer carries the same payloads (no model involved)
        answer = ask(watched, FAQ_QUESTION)
        assert "guest2024" in answer.locator(".answer").inner_text()
        assert IMG_ONERROR in answer.locator(".answer").inner_text()
        assert_chat_answer_clean(answer, numbers={"1"})
        open_every_source(watched, answer)
        watched.assert_inert()

        # when: the conversation is reloaded from what was stored
        page.reload()
        page.wait_for_selector("html[data-chat-ready]")
        page.locator("li.msg.assistant .confidence-badge").nth(5).wait_for()
        # then: the same, from the stored messages and evidence
        for stored in page.locator("li.msg.assistant").all():
            assert_chat_answer_clean(stored, numbers={"1", "2", "3", "4", "5", "6", "7"})
        assert IMG_ONERROR in page.locator("#messages").inner_text()
        watched.assert_inert()


def test_chat_page_shows_the_answer_of_an_obeying_model_inert(hostile_kb, openai_provider, browse):
    # given: a remote model that writes every marker, image and tag the documents ask for
    openai_provider.enqueue("openai.chat", *[obeying_answer()] * 8)
    with live_chat_server() as base_url:
        watched = browse(base_url)
        page = watched.page
        page.goto(f"{base_url}/?kb={hostile_kb.slug}")
        page.wait_for_selector("html[data-chat-ready]")
        # when
        answer = ask(watched, RAG_QUESTION)
        # then: only the real source is a citation, nothing is an image or a link, tags are text
        numbers = {b.get_attribute("data-cite") for b in answer.locator(".source-chip").all()}
        assert {b.get_attribute("data-cite") for b in answer.locator(".answer button.cite").all()} == {"1"}
        assert_chat_answer_clean(answer, numbers=numbers)
        text = answer.locator(".answer").inner_text()
        assert IMG_ONERROR in text and SCRIPT in text
        assert "来源 9" not in text and "来源 7" not in text
        answer.locator(".answer button.cite").first.click()
        page.locator("#source-panel").wait_for(state="visible")
        watched.assert_inert()


def assert_links_shown_as_text(answer) -> None:
    """The document's links: every address readable in full, only the allowed host's a link."""
    text = answer.locator(".answer").inner_text()
    for address in SHOWN_ADDRESSES:
        assert address in text, address
    assert [a.get_attribute("href") for a in answer.locator(".answer a").all()] == [ALLOWED_LINK]


def test_chat_page_shows_links_from_documents_as_text_and_keeps_the_allowed_host_clickable(hostile_kb, browse):
    with live_chat_server() as base_url:
        watched = browse(base_url)
        page = watched.page
        page.goto(f"{base_url}/?kb={hostile_kb.slug}")
        page.wait_for_selector("html[data-chat-ready]")
        # when: the answer quotes the line with a phishing "download centre", a mailto: link, bare
        # URLs and an e-mail address, and a link to the one allowed host
        answer = ask(watched, LINKS_QUESTION)
        # then
        assert_links_shown_as_text(answer)
        watched.assert_inert()
        # and: the same once the conversation is reloaded from what was stored
        page.reload()
        page.wait_for_selector("html[data-chat-ready]")
        stored = page.locator("li.msg.assistant").first
        stored.locator(".confidence-badge").wait_for()
        assert_links_shown_as_text(stored)
        watched.assert_inert()


def test_chat_page_does_not_link_an_answer_stored_before_links_were_shown_as_text(hostile_kb, member_user, browse):
    # given: an answer stored as it was given before, its document's links untouched (GFM would
    # autolink its bare URLs and e-mail addresses)
    conversation = Conversation.objects.create(knowledge_base=hostile_kb, user=member_user, title="旧会话")
    Message.objects.create(conversation=conversation, role=MessageRole.USER, content=LINKS_QUESTION)
    Message.objects.create(conversation=conversation, role=MessageRole.ASSISTANT, content=LINKS_LINE,
                           status=MessageStatus.COMPLETE)
    with live_chat_server() as base_url:
        watched = browse(base_url, cookies=session_cookie_for(member_user))
        page = watched.page
        # when
        page.goto(f"{base_url}/?kb={hostile_kb.slug}&c={conversation.pk}")
        page.wait_for_selector("html[data-chat-ready]")
        answer = page.locator("li.msg.assistant").first
        answer.locator(".answer").wait_for()
        # then: the page itself keeps them text
        text = answer.locator(".answer").inner_text()
        for address in ("http://evil.example/phish-login", "mailto:phish@evil.example", "https://evil.example/bare-help",
                        "www.evil.example/print", "print@evil.example"):
            assert address in text, address
        assert [a.get_attribute("href") for a in answer.locator(".answer a").all()] == [ALLOWED_LINK]
        watched.assert_inert()


# --- the admin ------------------------------------------------------------------------------------


def hostile_turns(kb) -> None:
    """Conversations and traces as readers leave them, answered from the hostile content."""
    requester = Requester(AnonymousUser(), session_key="hostile-reader")
    conversation_id = None
    # The first question (the conversation's title) carries markup of its own.
    for question in (f"{IMG_ONERROR}{SCRIPT} 访客登记处在哪里？", RAG_QUESTION, CONTACT_QUESTION, FAQ_QUESTION):
        result = RAGService().answer(
            query=ChatQuery(knowledge_base_id=kb.slug, question=question, conversation_id=conversation_id),
            requester=requester,
        )
        conversation_id = result.conversation_id


def test_admin_pages_show_hostile_content_as_text(hostile_kb, staff_user, browse):
    # given: readers asked the hostile knowledge base, and staff open what it holds
    hostile_turns(hostile_kb)
    kb = hostile_kb
    chunks = [c for c in Chunk.objects.filter(document__knowledge_base=kb) if "<" in c.content]
    assert chunks
    trap = "window.__xss=1"
    pages = [
        (reverse("admin:knowledge_document_changelist") + f"?knowledge_base__id__exact={kb.pk}", HOSTILE_TITLE),
        *[(reverse("admin:knowledge_document_change", args=[d.pk]), d.title) for d in Document.objects.filter(knowledge_base=kb)],
        (reverse("admin:knowledge_chunk_changelist") + "?q=onerror", "onerror"),
        *[(reverse("admin:knowledge_chunk_change", args=[c.pk]), trap) for c in chunks],
        (reverse("admin:knowledge_faq_changelist"), FAQ_QUESTION),
        *[(reverse("admin:knowledge_faq_change", args=[f.pk]), IMG_ONERROR) for f in FAQ.objects.filter(knowledge_base=kb)],
        (reverse("admin:chat_querytrace_changelist"), trap),
        *[(reverse("admin:chat_querytrace_change", args=[t.pk]), trap) for t in QueryTrace.objects.filter(knowledge_base=kb)],
        (reverse("admin:chat_conversation_changelist"), trap),
        *[(reverse("admin:chat_conversation_change", args=[c.pk]), SCRIPT) for c in Conversation.objects.filter(knowledge_base=kb)],
    ]
    cookies = session_cookie_for(staff_user)
    with live_chat_server() as base_url:
        watched = browse(base_url, cookies=cookies)
        page = watched.page
        for path, payload in pages:
            # when
            response = page.goto(base_url + path)
            # then
            assert response.status == 200, path
            assert payload in watched.visible_text(), path
            watched.assert_inert()

        # when: the hit test runs a question that finds the hostile chunks
        page.goto(base_url + reverse("hit-test", args=[kb.pk]))
        page.fill("textarea[name=question]", RAG_QUESTION)
        page.locator("input[type=submit]").click()
        page.locator(".ht-result").first.wait_for()
        # then
        assert IMG_ONERROR in watched.visible_text() and SCRIPT in watched.visible_text()
        watched.assert_inert()
