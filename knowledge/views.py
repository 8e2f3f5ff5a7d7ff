"""Server-rendered pages of the knowledge app."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django_eventstream.views import events

from ragsite.errors import DomainError

from .access import Role, access_knowledge_base_by_pk
from .eventstream import ensure_relay


def kb_events(request: HttpRequest, kb_id: int) -> HttpResponse:
    """SSE stream of a knowledge base's ingestion progress, for its editors (admin tooling)."""
    try:
        access_knowledge_base_by_pk(user=request.user, pk=kb_id, role=Role.EDITOR)
    except DomainError as error:
        return JsonResponse({"code": error.code, "detail": str(error.message)}, status=error.http_status)
    ensure_relay()
    return events(request, **{"format-channels": ["kb-{kb_id}"], "kb_id": kb_id})
