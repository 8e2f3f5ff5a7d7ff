"""Every admin page a staff member opens reads in Chinese and fits a 1,440 px window.

The world is built the way staff build it (real ingestion, an evaluation run, questions asked
through the API), with content written in Chinese; every registered model's list, its first row's
page and its add page are then opened in Chromium as a superuser. A Latin word on a page must come
from the content itself or be one of the abbreviations Chinese staff write in Latin letters; a
page may not scroll sideways, and no list header or cell may run into its neighbour.
"""

from __future__ import annotations

import hashlib
import io
import json
import re

import pytest
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import Group
from django.core.files.base import ContentFile
from django.core.management import call_command
from django.urls import reverse
from PIL import Image
from django.test import RequestFactory
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from evaluation.models import EvalRun

from knowledge.catalog import services as catalog_services
from knowledge.faqs import services as faq_services
from knowledge.models import Chunk, Document, DocumentAsset, DocumentStatus, KnowledgeBase
from tests.conftest import make_document
from tests.evaluation.test_evaluate_retrieval import CORPUS, QUERIES, write_dataset
from tests.live import daphne_server, session_cookie_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WIDTH = 1440
# A run of letters, digits, dots, hyphens and underscores. One holding a digit is a code or a
# hash (X3, v2, a SHA-256, a token key), one with a dot or hyphen inside a host, file name or
# identifier given as an example (docs.example.com, queries.jsonl, employee-handbook): values,
# not words. Underscored names (below_relevance_floor) are what the check is for.
TOKEN = re.compile(r"[A-Za-z0-9_.\-]+")
LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
# Written in Latin letters in Chinese workplaces too: abbreviations, units, file formats, keyboard
# keys in Django's own Chinese help texts, the product's name.
ABBREVIATIONS = {
    "FAQ", "ID", "API", "URL", "PDF", "OCR", "SHA", "MIME", "JSON", "Markdown", "ms", "KB", "MB", "GB",
    "IP", "HTTP", "HTTPS", "LDAP", "Control", "Command", "Mac", "ragsite",
    "txt", "md", "html", "htm", "pdf", "docx", "xlsx", "pptx", "csv", "png", "jpg", "jpeg", "jsonl",
    "CSV", "XLSX", "JSONL",
}
# Rendered values that are opaque by nature: the stored password's algorithm, salt and hash.
OPAQUE = ".field-password .readonly, .field-password p"
FAQS = [
    {"question": "年假有几天？", "answer": "入职满一年的员工每年享有 **十五天** 带薪年假。", "similar_questions": ["一年几天年假"]},
    {"question": "住宿标准是多少？", "answer": "一线城市每晚六百元，其他城市每晚四百元。"},
]
QUESTIONS = ["年假有几天？", "一线城市住宿标准每晚多少钱？", "远程办公怎么连 VPN？", "今天北京天气怎么样？", "你好"]
USERNAME = "管理员"
KB_NAME = "人事与 IT 制度"


def latin_words(text: str) -> set[str]:
    return {
        word for token in TOKEN.findall(text) if not re.search(r"\d|\w[.-]\w", token) for word in LATIN_WORD.findall(token)
    }


def content_words() -> set[str]:
    """Latin words the content itself carries: a document title like "VPN 使用", the knowledge
    base's identifier, the tags its documents were imported under."""
    tags = list(Document.objects.values_list("source_tag", flat=True).distinct())
    slugs = list(KnowledgeBase.objects.values_list("slug", flat=True))
    return latin_words(json.dumps([CORPUS, QUERIES, FAQS, QUESTIONS, KB_NAME, USERNAME, tags, slugs], ensure_ascii=False))


def _jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "blue").save(buffer, format="JPEG")
    return buffer.getvalue()


@pytest.fixture
def staffed_world(tmp_path, milvus, run_tasks, media_root, django_user_model):
    """A published knowledge base with documents, FAQs, an evaluation set and run, questions
    asked, a failed upload, an image, a draft, a group and a token."""
    superuser = django_user_model.objects.create_user(USERNAME, password="pw-admin-pages", is_staff=True, is_superuser=True)
    call_command("evaluate_retrieval", "--dataset", str(write_dataset(tmp_path)), "--kb", "pages", "--build",
                 "--mode", "sparse", stdout=io.StringIO())
    call_command("evaluate_retrieval", "--dataset", str(tmp_path), "--kb", "pages", "--mode", "hybrid", stdout=io.StringIO())
    kb = catalog_services.update_knowledge_base(kb=KnowledgeBase.objects.get(slug="pages"), actor=superuser, name=KB_NAME)
    for faq in FAQS:
        faq_services.save_faq(kb=kb, actor=superuser, **faq)
    api = APIClient()
    api.force_authenticate(superuser)
    for question in QUESTIONS:
        response = api.post("/api/chat", {"knowledge_base_id": "pages", "question": question}, format="json")
        assert response.status_code == 200, response.content
    failed = make_document(kb, status=DocumentStatus.FAILED, title="无法解析的报销单")
    Document.objects.filter(pk=failed.pk).update(error_code="parse_failed", error_message="文件已损坏，无法读取。")
    document = Document.objects.filter(knowledge_base=kb, status=DocumentStatus.READY).first()
    asset = DocumentAsset(document=document, sha256=hashlib.sha256(_jpeg()).hexdigest(), caption="打印机后盖示意图", width=8, height=8)
    asset.file.save("a.jpg", ContentFile(_jpeg()), save=False)
    asset.save()
    catalog_services.create_draft_version(kb=kb, actor=superuser, notes="下季度制度更新")
    group = Group.objects.create(name="人事部")
    superuser.groups.add(group)
    Token.objects.create(user=superuser)
    assert Chunk.objects.filter(knowledge_base=kb).exists()
    return superuser


def admin_urls(superuser) -> list[str]:
    """Each registered model's list, its newest row and its add page (where one may add), and
    the pages the admin adds of its own."""
    request = RequestFactory().get("/admin/")
    request.user = superuser
    urls = []
    for model, model_admin in admin.site._registry.items():
        name = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        urls.append(reverse(f"{name}_changelist"))
        newest = model_admin.get_queryset(request).order_by("-pk").first()
        if newest is not None:
            urls.append(reverse(f"{name}_change", args=[newest.pk]))
        if model_admin.has_add_permission(request):
            urls.append(reverse(f"{name}_add"))
    kb = KnowledgeBase.objects.get(slug="pages")
    runs = list(EvalRun.objects.order_by("pk").values_list("pk", flat=True))
    urls += [
        reverse("admin:index"), reverse("admin:knowledge_document_upload"), reverse("admin:knowledge_document_queue"),
        reverse("hit-test", args=[kb.pk]), reverse("admin:evaluation_evalset_import"),
        reverse("admin:evaluation_evalrun_charts"), reverse("admin:evaluation_evalrun_compare", args=runs[:2]),
        reverse("admin:password_change"),
    ]
    return urls


def english_and_layout(page) -> dict:
    """What the page shows and how it lays out. Measured first; the text read after leaving out
    literal values (an example identifier or file name in <code>) and opaque ones."""
    return page.evaluate(
        """(opaque) => {
            const seen = {
                lang: document.documentElement.lang,
                overflow: document.documentElement.scrollWidth - window.innerWidth,
                spilling: Array.from(document.querySelectorAll("#result_list th, #result_list td"))
                    .filter(cell => cell.scrollWidth > cell.clientWidth + 1).map(cell => cell.className || cell.textContent.slice(0, 20)),
                crushed: Array.from(document.querySelectorAll("#result_list thead th"))
                    .filter(th => th.textContent.trim().length > 1 && th.getBoundingClientRect().width < 28).map(th => th.textContent.trim()),
            };
            document.querySelectorAll(opaque + ", code, kbd").forEach(e => e.remove());
            seen.text = [
                document.body.innerText,
                ...Array.from(document.querySelectorAll("input[placeholder], textarea[placeholder]")).map(e => e.placeholder),
                ...Array.from(document.querySelectorAll("input[type=submit], input[type=button]")).map(e => e.value),
            ].join(" ");
            return seen;
        }""",
        OPAQUE,
    )


def test_every_admin_page_reads_in_chinese_and_fits_1440_px(chromium, staffed_world):
    # given: the staffed world and a superuser's browser at 1,440 px
    allowed = ABBREVIATIONS | content_words()
    urls = admin_urls(staffed_world)
    cookie = session_cookie_for(staffed_world)
    problems: dict[str, list] = {}
    with daphne_server() as base_url:
        context = chromium.new_context(locale="zh-CN", viewport={"width": WIDTH, "height": 900})
        context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie[settings.SESSION_COOKIE_NAME], "url": base_url}])
        page = context.new_page()
        # when: each page is opened, and the hit test asked a question
        pages = []
        for url in urls:
            response = page.goto(base_url + url)
            assert response.status == 200, (url, response.status)
            pages.append((url, english_and_layout(page)))
        page.goto(base_url + reverse("hit-test", args=[KnowledgeBase.objects.get(slug="pages").pk]))
        page.fill("textarea[name=question]", "年假有几天？")
        page.click("form input[type=submit].default")
        page.wait_for_selector("#result-1")
        pages.append(("hit test answered", english_and_layout(page)))
        context.close()

    # then: no page speaks developer English, scrolls sideways or crushes a column
    for url, seen in pages:
        english = sorted(latin_words(seen["text"]) - allowed)
        found = {
            "english": english, "lang": seen["lang"] if seen["lang"] != "zh-hans" else None,
            "overflow": seen["overflow"] if seen["overflow"] > 0 else None,
            "spilling": seen["spilling"], "crushed": seen["crushed"],
        }
        if any(found.values()):
            problems[url] = {key: value for key, value in found.items() if value}
    assert problems == {}, json.dumps(problems, ensure_ascii=False, indent=1)
    assert len(pages) > 30  # every list, row and add page was opened
