"""Retrieval API and the admin hit-test page: thin layers over RetrievalService."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.http import FileResponse, HttpRequest
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from knowledge.access import access_asset, access_knowledge_base
from knowledge.models import KnowledgeBase

from .contracts import RetrievalRequest, RetrievalResponse
from .factory import build_retrieval_service
from .forms import HitTestForm
from .serializers import RetrievalRequestInput


def run_retrieval(*, user, data: dict) -> RetrievalResponse:
    kb = access_knowledge_base(user=user, kb_id=data["knowledge_base_id"])
    request = RetrievalRequest(
        kb_id=kb.pk,
        question=data["question"],
        top_k=data["top_k"],
        mode=data["mode"],
        candidate_k=data["candidate_k"],
        enable_query_rewrite=data["enable_query_rewrite"],
        enable_rerank=data["enable_rerank"],
        enable_parent_expansion=data["enable_parent_expansion"],
        enable_hyde=data["enable_hyde"],
        dynamic_top_k=data["dynamic_top_k"],
        document_ids=data["document_ids"],
    )
    return build_retrieval_service(kb).retrieve(request)


class SearchView(APIView):
    """Ranked evidence as a JSON array (kept an array for older clients; see /explain)."""

    @extend_schema(request=RetrievalRequestInput, responses={200: dict})
    def post(self, request: Request) -> Response:
        serializer = RetrievalRequestInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        response = run_retrieval(user=request.user, data=serializer.validated_data)
        return Response([result.as_dict() for result in response.results])


class ExplainView(APIView):
    """The same ranked evidence plus the full retrieval trace."""

    @extend_schema(request=RetrievalRequestInput, responses={200: dict})
    def post(self, request: Request) -> Response:
        serializer = RetrievalRequestInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        response = run_retrieval(user=request.user, data=serializer.validated_data)
        return Response(response.as_dict())


class AssetBytesView(APIView):
    """An image of the knowledge base, permission-checked; the only images answers may show."""

    @extend_schema(responses={(200, "image/jpeg"): bytes})
    def get(self, request: Request, asset_id: int) -> FileResponse:
        asset = access_asset(user=request.user, asset_id=asset_id)
        response = FileResponse(asset.file.open("rb"), content_type="image/jpeg")
        response["Cache-Control"] = "private, max-age=3600"
        response["X-Content-Type-Options"] = "nosniff"
        return response


@staff_member_required
def hit_test(request: HttpRequest, kb_pk: int) -> TemplateResponse:
    """Admin page: run a question through the same RetrievalService and show the trace."""
    from ragsite.errors import DomainError

    from .contracts import RetrievalError

    kb = get_object_or_404(KnowledgeBase, pk=kb_pk)
    form = HitTestForm(request.POST or None)
    response = error = None
    if request.method == "POST" and form.is_valid():
        data = {**form.cleaned_data, "knowledge_base_id": kb.slug}
        data["document_ids"] = form.cleaned_data["document_ids"] or None
        try:
            response = run_retrieval(user=request.user, data=data)
        except (RetrievalError, DomainError) as exc:
            error = f"{exc.code}: {exc.message}"
    from django.contrib import admin

    return TemplateResponse(
        request,
        "admin/retrieval/hit_test.html",
        {
            **admin.site.each_context(request),
            "title": f"命中测试 · {kb.name}",
            "kb": kb,
            "form": form,
            "response": response,
            "trace": response.trace.as_dict() if response else None,
            "error": error,
            "opts": KnowledgeBase._meta,
        },
    )
