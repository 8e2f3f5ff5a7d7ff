"""Retrieval API and the admin hit-test page: thin layers over RetrievalService."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from knowledge.access import Role, access_asset, access_chunk, access_knowledge_base_by_pk
from knowledge.models import KnowledgeBase
from knowledge.previews import render_chunk_preview
from ragsite.errors import DomainError, Forbidden, NotFound
from ragsite.openapi import error_responses
from ragsite.throttles import RETRIEVAL_THROTTLES

from .contracts import RetrievalError, RetrievalResponse
from .factory import retrieve_for_user
from .forms import HitTestForm
from .labels import describe_result, describe_trace
from .serializers import ExplainOutput, RetrievalRequestInput, RetrievalResultOutput


class _RetrievalView(APIView):
    throttle_classes = RETRIEVAL_THROTTLES

    def post(self, request: Request) -> Response:
        serializer = RetrievalRequestInput(data=request.data, context={"user": request.user})
        serializer.is_valid(raise_exception=True)
        return Response(self.shape(retrieve_for_user(user=request.user, **serializer.validated_data)))

    def shape(self, response: RetrievalResponse):
        raise NotImplementedError


# 403: costly options asked for anonymously; 404: a knowledge base the caller may not read;
# 503: every channel (or the facts store) failed.
RETRIEVAL_ERRORS = error_responses(403, 404, 503)


@extend_schema_view(
    post=extend_schema(
        summary=gettext_lazy("检索证据"),
        description=gettext_lazy(
            "在知识库的当前生效版本中检索，按相关度返回证据分块数组，不生成答案（数组形式是为兼容旧客户端；"
            "需要检索追踪请用 `/api/retrieval/explain`）。可选稠密、稀疏或混合检索（`mode`），"
            "可开启查询改写、重排、HyDE、父块扩展，按 `document_ids` 或元数据条件 `filters` 限定文档。"
            "公开知识库允许匿名调用，但匿名调用者不能开启默认关闭的耗费模型调用的选项，也不能要求超过 30 个候选"
            "（403 `option_requires_login`）。按登录用户与匿名 IP 限速（429）。"
            "所有检索通道都失败时返回 503，`channel_errors` 列出各通道的错误。"
        ),
        request=RetrievalRequestInput, responses={200: RetrievalResultOutput(many=True), **RETRIEVAL_ERRORS},
    )
)
class SearchView(_RetrievalView):
    """Ranked evidence as a JSON array (kept an array for older clients; see /explain)."""

    def shape(self, response: RetrievalResponse):
        return [result.as_dict() for result in response.results]


@extend_schema_view(
    post=extend_schema(
        summary=gettext_lazy("检索并返回追踪"),
        description=gettext_lazy(
            "与 `/api/retrieval/search` 相同的检索（同样的请求体、权限与限速），结果放在 `results` 中，"
            "另在 `trace` 中返回完整的检索追踪：查询变体、各通道候选数、各阶段耗时、缓存命中、降级、"
            "过滤条件与 HyDE、动态 top_k 的情况，用于调试召回效果。"
        ),
        request=RetrievalRequestInput, responses={200: ExplainOutput, **RETRIEVAL_ERRORS},
    )
)
class ExplainView(_RetrievalView):
    """The same ranked evidence plus the full retrieval trace."""

    def shape(self, response: RetrievalResponse):
        return response.as_dict()


class AssetBytesView(APIView):
    """An image of the knowledge base, permission-checked; the only images answers may show."""

    @extend_schema(
        summary=gettext_lazy("获取证据图片"),
        description=gettext_lazy(
            "返回从知识库文档中抽取的一张图片（JPEG），按调用者对其知识库的读取权限校验；"
            "检索结果与答案引用中 `assets[].url` 指向这里，这也是答案可以展示的唯一图片来源。"
            "不存在或无权读取时返回 404，图片文件丢失时返回 404 `asset_file_missing`。"
        ),
        responses={(200, "image/jpeg"): bytes},
    )
    def get(self, request: Request, asset_id: int) -> FileResponse:
        asset = access_asset(user=request.user, asset_id=asset_id)
        try:
            handle = asset.file.open("rb")
        except OSError as exc:  # the row exists but storage lost the bytes
            raise NotFound(_("资源 %(id)s 的图片文件已丢失。") % {"id": asset_id}, code="asset_file_missing") from exc
        response = FileResponse(handle, content_type="image/jpeg")
        response["Cache-Control"] = "private, max-age=3600"
        response["X-Content-Type-Options"] = "nosniff"
        return response


class ChunkPreviewView(APIView):
    """The PDF region a chunk came from, highlighted, so a citation opens exactly its evidence."""

    @extend_schema(
        summary=gettext_lazy("分块预览图"),
        description=gettext_lazy(
            "返回分块在其 PDF 页面上的区域截图（PNG，高亮标出该区域），"
            "让引用直接打开对应的原文证据；检索结果的 `preview_url` 指向这里。"
            "非 PDF 或没有页面区域的分块返回 404 `preview_unavailable`，"
            "渲染失败返回 422 `preview_failed`。"
        ),
        responses={(200, "image/png"): bytes, **error_responses(422)},
    )
    def get(self, request: Request, chunk_id: int) -> HttpResponse:
        chunk = access_chunk(user=request.user, chunk_id=chunk_id)
        response = HttpResponse(render_chunk_preview(chunk), content_type="image/png")
        response["Cache-Control"] = "private, max-age=3600"
        response["X-Content-Type-Options"] = "nosniff"
        return response


@staff_member_required
def hit_test(request: HttpRequest, kb_pk: int) -> TemplateResponse:
    """Admin page for the knowledge base's editors: run a question through the same
    RetrievalService and show the trace."""
    try:
        kb = access_knowledge_base_by_pk(user=request.user, pk=kb_pk, role=Role.EDITOR)
    except NotFound as error:
        raise Http404(str(error.message)) from error
    except Forbidden as error:
        raise PermissionDenied(str(error.message)) from error
    form = HitTestForm(request.POST or None)
    response = error = None
    if request.method == "POST" and form.is_valid():
        options = {**form.cleaned_data, "document_ids": form.cleaned_data["document_ids"] or None}
        try:
            response = retrieve_for_user(user=request.user, knowledge_base_id=kb.slug, **options)
        except (RetrievalError, DomainError) as exc:
            error = {"message": str(exc.message), "code": exc.code}
    return TemplateResponse(
        request,
        "admin/retrieval/hit_test.html",
        {
            **admin.site.each_context(request),
            "title": _("命中测试 · %(kb)s") % {"kb": kb.name},
            "kb": kb,
            "form": form,
            "response": response,
            "rows": [describe_result(r) for r in response.results] if response else [],
            "trace": describe_trace(response.trace) if response else None,
            "error": error,
            "opts": KnowledgeBase._meta,
        },
    )
