"""Server-rendered pages of the knowledge app."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_eventstream.views import events

from .access import readable_knowledge_bases
from .eventstream import ensure_relay


def home(request: HttpRequest) -> HttpResponse:
    kbs = readable_knowledge_bases(request.user).select_related("active_version")
    return render(request, "knowledge/home.html", {"knowledge_bases": kbs})


def kb_events(request: HttpRequest, kb_id: int) -> HttpResponse:
    ensure_relay()
    return events(request, **{"format-channels": ["kb-{kb_id}"], "kb_id": kb_id})
