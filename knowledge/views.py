"""Server-rendered pages of the knowledge app."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django_eventstream.views import events

from ragsite.errors import DomainError

from knowledge.access import Role, access_knowledge_base_by_pk
from knowledge.eventstream import RESUME_PARAMETER, ensure_relay


def kb_events(request: HttpRequest, kb_id: int) -> HttpResponse:
    """SSE stream of a knowledge base's ingestion progress, for its editors (admin tooling)."""
    try:
        access_knowledge_base_by_pk(user=request.user, pk=kb_id, role=Role.EDITOR)
    except DomainError as error:
        return JsonResponse({"code": error.code, "detail": str(error.message)}, status=error.http_status)
    ensure_relay()
    # django-eventstream takes the channels and the user from an `es-meta` token in the query
    # string when there is one, over the URL and the session; anyone who knows or guesses the
    # signing key could name any channel and any user. Only the resume position is the
    # client's to give: the channel is the URL's, the user the session's (KnowledgeChannelManager).
    resume = QueryDict(mutable=True)
    resume.setlist(RESUME_PARAMETER, request.GET.getlist(RESUME_PARAMETER))
    request.GET = resume
    return events(request, kb_id=kb_id)
