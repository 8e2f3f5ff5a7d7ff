"""Server-rendered pages of the knowledge app."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, HttpResponseNotFound
from django.utils.translation import gettext as _
from django_eventstream.views import events

from .access import is_manager
from .eventstream import ensure_relay
from .models import KnowledgeBase


def kb_events(request: HttpRequest, kb_id: int) -> HttpResponse:
    """SSE stream of a knowledge base's ingestion progress (staff only: it is admin tooling)."""
    if not is_manager(request.user):
        return HttpResponseForbidden(_("只有管理员可以查看处理进度。"))
    if not KnowledgeBase.objects.filter(pk=kb_id).exists():
        return HttpResponseNotFound(_("知识库不存在。"))
    ensure_relay()
    return events(request, **{"format-channels": ["kb-{kb_id}"], "kb_id": kb_id})
