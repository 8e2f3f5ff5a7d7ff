"""The chat page at `/`, server side: which knowledge bases it offers, its security headers, the
files it loads, its JavaScript string catalog and its language."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from chat.page import CATALOG, CONTENT_SECURITY_POLICY
from knowledge.faqs import services as faq_services
from knowledge.models import FAQ, Visibility
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def data_block(response, element_id: str):
    """The JSON of a `json_script` block of the page."""
    match = re.search(
        rf'<script id="{element_id}" type="application/json">(.*?)</script>', response.content.decode(), re.S
    )
    assert match, element_id
    return json.loads(match.group(1))


def offered_slugs(response) -> list[str]:
    return [kb["id"] for kb in data_block(response, "chat-config")["knowledge_bases"]]


def static_body(client, url: str) -> bytes:
    response = client.get(url)
    assert response.status_code == 200, url
    return b"".join(response.streaming_content) if response.streaming else response.content


@pytest.fixture
def public_and_internal_kbs():
    return make_kb(visibility=Visibility.PUBLIC), make_kb(visibility=Visibility.INTERNAL)


def test_home_is_the_chat_page(client):
    assert reverse("home") == "/"
    response = client.get("/")
    assert response.status_code == 200
    assert "chat/page.html" in [t.name for t in response.templates]


def test_anonymous_visitors_are_offered_public_knowledge_bases_only(client, public_and_internal_kbs):
    # given
    public, internal = public_and_internal_kbs
    # when
    response = client.get("/")
    # then
    assert offered_slugs(response) == [public.slug]
    assert f'<option value="{public.slug}">' in response.content.decode()
    assert internal.slug not in response.content.decode()


def test_members_are_offered_internal_knowledge_bases_too(client, member_user, public_and_internal_kbs):
    public, internal = public_and_internal_kbs
    client.force_login(member_user)
    # when
    response = client.get("/")
    # then
    assert sorted(offered_slugs(response)) == sorted([public.slug, internal.slug])


def test_restricted_knowledge_bases_are_offered_to_their_groups_only(client, member_user, engineer_user, engineers_group):
    # given
    restricted = make_kb(visibility=Visibility.RESTRICTED, groups=[engineers_group])
    # when
    client.force_login(member_user)
    as_member = offered_slugs(client.get("/"))
    client.force_login(engineer_user)
    as_engineer = offered_slugs(client.get("/"))
    # then
    assert restricted.slug not in as_member
    assert restricted.slug in as_engineer


def test_unpublished_knowledge_bases_say_so(client):
    draft = make_kb(visibility=Visibility.PUBLIC)
    response = client.get("/")
    assert data_block(response, "chat-config")["knowledge_bases"] == [
        {"id": draft.slug, "name": draft.name, "published": False, "link_hosts": [], "examples": []}
    ]
    assert "（尚未发布）" in response.content.decode()


def test_each_knowledge_base_offers_its_most_asked_enabled_faq_questions(client, staff_user):
    # given: two public bases; the first has five FAQs with hit counts and one disabled FAQ
    first, second = make_kb(visibility=Visibility.PUBLIC), make_kb(visibility=Visibility.PUBLIC)
    for number, hits in enumerate([3, 9, 0, 5, 1]):
        faq = faq_services.save_faq(kb=first, question=f"问题{number}？", answer="答案。", actor=staff_user)
        FAQ.objects.filter(pk=faq.pk).update(hit_count=hits)
    hidden = faq_services.save_faq(kb=first, question="停用的问题？", answer="答案。", actor=staff_user)
    FAQ.objects.filter(pk=hidden.pk).update(enabled=False, hit_count=100)
    faq_services.save_faq(kb=second, question="第二个库的问题？", answer="答案。", actor=staff_user)
    # when
    offered = {kb["id"]: kb["examples"] for kb in data_block(client.get("/"), "chat-config")["knowledge_bases"]}
    # then: the four most asked enabled questions, most asked first, each base its own
    assert offered[first.slug] == ["问题1？", "问题3？", "问题0？", "问题4？"]
    assert offered[second.slug] == ["第二个库的问题？"]


def test_page_allows_nothing_but_its_own_origin_and_runs_no_inline_script(client):
    response = client.get("/")
    # then: the policy
    assert response["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    directives = dict(d.strip().split(" ", 1) for d in CONTENT_SECURITY_POLICY.split(";"))
    for name in ("default-src", "img-src", "script-src", "style-src", "connect-src"):
        assert directives[name] == "'self'"
    # and: every script is a file of this site or a JSON data block; no inline handlers or styles
    html = response.content.decode()
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
    assert scripts
    for attributes, body in scripts:
        assert ('src="/static/' in attributes and not body.strip()) or 'type="application/json"' in attributes
    assert not re.search(r"\son\w+=", html)
    assert "<style" not in html and "style=" not in html


def test_anonymous_visitors_get_a_csrf_cookie_but_no_session_for_looking(client):
    # when: the page is only read
    response = client.get("/")
    client.get("/api/chat/conversations")
    # then: nothing is written for the visitor yet
    assert response.cookies[settings.CSRF_COOKIE_NAME].value
    assert settings.SESSION_COOKIE_NAME not in client.cookies
    config = data_block(response, "chat-config")
    assert config["csrf_token"] and config["csrf_cookie_name"] == settings.CSRF_COOKIE_NAME
    assert config["urls"] == {
        "stream": "/api/chat/stream", "conversations": "/api/chat/conversations", "assets": "/api/assets/",
        "feedback": "/api/chat/messages/0/feedback",
    }


def test_the_first_question_gives_an_anonymous_visitor_the_session_that_owns_it(client):
    # given: a public knowledge base (a greeting needs no retrieval)
    kb = make_kb(visibility=Visibility.PUBLIC)
    # when
    answer = client.post("/api/chat", {"knowledge_base_id": kb.slug, "question": "你好"}, content_type="application/json")
    listed = client.get("/api/chat/conversations").json()
    again = client.get("/")
    # then: the conversation is theirs, and the session stays the same
    assert answer.status_code == 200, answer.content
    assert settings.SESSION_COOKIE_NAME in client.cookies
    assert [c["id"] for c in listed["results"]] == [answer.json()["conversation_id"]]
    assert settings.SESSION_COOKIE_NAME not in again.cookies


def test_scripts_and_styles_it_loads_are_served(client):
    html = client.get("/").content.decode()
    urls = re.findall(r'(?:src|href)="(/static/[^"]+)"', html)
    assert {"/static/vendor/marked/marked.umd.js", "/static/vendor/dompurify/purify.min.js",
            "/static/chat/answer_markdown.js", "/static/chat/chat.js", "/static/chat/chat.css"} <= set(urls)
    for url in urls:
        assert static_body(client, url)
    assert b"marked v18.2.1" in static_body(client, "/static/vendor/marked/marked.umd.js")
    assert b"DOMPurify 3.5.0" in static_body(client, "/static/vendor/dompurify/purify.min.js")


def test_vendored_libraries_come_with_their_licences():
    vendor = ROOT / "static" / "vendor"
    assert "MIT license" in (vendor / "marked" / "LICENSE").read_text()
    assert "Apache License" in (vendor / "dompurify" / "LICENSE").read_text()
    readme = (vendor / "README.md").read_text()
    for needle in ("marked", "18.2.1", "dompurify", "3.5.0", "sha512-"):
        assert needle in readme


def test_javascript_strings_come_in_a_catalog(client):
    catalog = data_block(client.get("/"), "chat-i18n")
    assert catalog == {key: str(value) for key, value in CATALOG.items()}
    assert catalog["searching"] == "正在检索知识库…"
    assert catalog["stopped"] == "已停止"
    assert catalog["reason_faq_exact_match"] == "FAQ 精确命中"
    assert catalog["reason_insufficient_context"] == "依据不足"


def test_reason_labels_cover_every_confidence_reason():
    from chat.pipeline import confidence

    lines = Path(confidence.__file__).read_text(encoding="utf-8").splitlines()
    reasons = {r for line in lines if "reasons.append(" in line for r in re.findall(r'"([a-z_]+)"', line)}
    assert {"faq_exact_match", "rag_without_context", "images_blocked"} <= reasons
    assert {f"reason_{r}" for r in reasons} <= set(CATALOG)


@pytest.mark.parametrize("how", [{"path": "/?lang=en"}, {"path": "/", "HTTP_ACCEPT_LANGUAGE": "en"}])
def test_english(client, how):
    path = how.pop("path")
    response = client.get(path, **how)
    html = response.content.decode()
    assert '<html lang="en">' in html
    assert "<title>Knowledge base Q&A</title>" in html
    assert ">New conversation</button>" in html
    catalog = data_block(response, "chat-i18n")
    assert catalog["stopped"] == "Stopped"
    assert catalog["reason_faq_exact_match"] == "FAQ exact hit"
    assert data_block(response, "chat-config")["language"] == "en"


def test_unknown_language_falls_back_to_chinese(client):
    html = client.get("/?lang=xx").content.decode()
    assert '<html lang="zh-hans">' in html
    assert ">新对话</button>" in html


def test_favicon_ico_points_at_the_icon(client):
    # when
    response = client.get("/favicon.ico")

    # then: browsers ask for it on every page, the admin included
    assert response.status_code == 301
    assert response["Location"].endswith("chat/favicon.svg")
