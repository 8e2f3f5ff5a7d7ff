"""The end-user chat page at `/`: a server-rendered shell; `static/chat/chat.js` does the rest
over the JSON / SSE API (`/api/chat/stream`, `/api/chat/conversations…`)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import render
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext_lazy as _
from django.views.decorators.csrf import ensure_csrf_cookie

from chat.labels import REASONS
from knowledge.access import readable_knowledge_bases
from knowledge.faqs.selectors import example_questions

# Nothing but this origin: answers quote documents written by others, so even if markup got
# through the renderer it could neither run nor fetch anything from elsewhere. Configuration
# reaches chat.js as JSON data blocks, never as inline script.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)

EXAMPLE_QUESTIONS = 4

# Strings that chat.js builds at run time; the template renders them for the active language.
CATALOG = {
    "searching": _("正在检索知识库…"),
    "generating": _("正在生成回答…"),
    "stopped": _("已停止"),
    "stop": _("停止"),
    "send": _("发送"),
    "error": _("出错了"),
    "network_error": _("网络连接失败，请稍后重试。"),
    "load_failed": _("会话加载失败。"),
    "no_conversations": _("还没有会话。"),
    "new_conversation": _("新对话"),
    "sources": _("参考来源"),
    "source": _("来源"),
    "close": _("关闭"),
    # Whole phrases: a bare "高" is also the image height of the admin, translated "Height".
    "level_high": _("置信度：高"),
    "level_medium": _("置信度：中"),
    "level_low": _("置信度：低"),
    "preview": _("原文区域"),
    "images": _("图片"),
    "faq": _("FAQ"),
    "web_source": _("网络来源（非知识库内容）"),
    "no_knowledge_base": _("请先选择知识库。"),
    "examples": _("可以这样问："),
    "locator_page": _("第 {page} 页"),
    "locator_sheet": _("工作表 {sheet} {cells}"),
    "locator_slide": _("第 {slide} 张幻灯片"),
    "locator_line": _("第 {line} 行"),
    "hit_direct_answer": _("直接回答"),
    "hit_faq_exact": _("FAQ 精确匹配"),
    "hit_faq_direct": _("FAQ 相似匹配"),
    "hit_rag": _("文档问答"),
    "hit_insufficient_context": _("依据不足"),
    "hit_clarify": _("反问确认"),
    "clarify_choices": _("请选择产品："),
    "feedback_up": _("有用"),
    "feedback_down": _("没用"),
    "feedback_reason": _("哪里不对？（可选）"),
    "feedback_send": _("提交"),
    "feedback_thanks": _("感谢反馈！"),
    "feedback_failed": _("反馈提交失败，请稍后重试。"),
    # Why a score is what it is: the words the trace admin uses too.
    **{f"reason_{code}": label for code, label in REASONS.items()},
}


@ensure_csrf_cookie
def chat_page(request: HttpRequest) -> HttpResponse:
    lang = request.GET.get("lang", "")
    if lang in dict(settings.LANGUAGES):
        translation.activate(lang)
        request.LANGUAGE_CODE = lang
    kbs = list(readable_knowledge_bases(request.user).select_related("active_version").order_by("name", "pk"))
    examples = example_questions(kb_ids=[kb.pk for kb in kbs], limit=EXAMPLE_QUESTIONS)
    config = {
        "knowledge_bases": [
            {"id": kb.slug, "name": kb.name, "published": kb.active_version_id is not None,
             # Hosts whose links stay clickable in this knowledge base's answers (knowledge/links.py).
             "link_hosts": list(kb.link_hosts),
             # Offered on an empty conversation, so a first visitor sees what the base can answer.
             "examples": examples.get(kb.pk, [])}
            for kb in kbs
        ],
        "csrf_token": get_token(request),
        "csrf_cookie_name": settings.CSRF_COOKIE_NAME,
        "language": translation.get_language(),
        "urls": {
            "stream": reverse("chat-stream"),
            "conversations": reverse("chat-conversations"),
            # "…/0/feedback" with the answer's id in place of the 0.
            "feedback": reverse("chat-feedback", args=[0]),
            "assets": reverse("asset-bytes", args=[0]).removesuffix("0"),
        },
    }
    response = render(
        request,
        "chat/page.html",
        {"knowledge_bases": kbs, "chat_config": config, "chat_catalog": CATALOG},
    )
    response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return response
