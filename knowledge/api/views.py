"""Knowledge API: thin views — validate, call one service or selector, serialize."""

from __future__ import annotations

from collections.abc import Mapping

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.generics import GenericAPIView
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ragsite.errors import Forbidden, ValidationFailed
from ragsite.openapi import error_responses

from knowledge.catalog import readiness
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.faqs import services as faq_services
from knowledge.access import (
    access_document,
    access_faq,
    access_knowledge_base,
    access_version,
    ROLE_GROUPS,
    Role,
    can_create_knowledge_base,
    readable_documents,
    readable_faqs,
    readable_knowledge_bases,
    readable_versions,
    role_in,
)
from knowledge.models import DocumentStatus
from .serializers import (
    ActivateInput,
    ActivationOutput,
    CacheInvalidateInput,
    CacheInvalidateOutput,
    DocumentDeletionOutput,
    DocumentOutput,
    DocumentUpdateInput,
    DocumentUploadInput,
    FAQInput,
    FAQOutput,
    KnowledgeBaseCreateInput,
    KnowledgeBaseOutput,
    KnowledgeBaseUpdateInput,
    SwitchInput,
    UploadOutcomeOutput,
    VersionCreateInput,
    VersionDetailOutput,
    VersionOutput,
)


# Changing these is the publisher's: who may read, who may change, when publishing is refused,
# which links readers may follow out of an answer, whether questions leave for a web search.
PUBLISHER_SETTINGS = {
    "visibility", "allowed_groups", "editor_groups", "publisher_groups", "release_max_regression_points",
    "link_allowed_hosts", "web_search_enabled",
}


def _seen_by(request: Request, kb) -> dict:
    """Serializer context: who looks, and whether they see editor-only fields."""
    return {"user": request.user, "editor": role_in(request.user, kb) >= Role.EDITOR}


class _ListView(GenericAPIView):
    """A list read, in pages: `?limit=&offset=` (REST_FRAMEWORK PAGE_SIZE by default), answered
    as DRF's {count, next, previous, results}."""

    def page_of(self, rows, serializer_class, **kwargs) -> Response:
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(serializer_class(page, many=True, **kwargs).data)


def _validated(serializer_class, data, **kwargs) -> dict:
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class KnowledgeBaseListView(_ListView):
    @extend_schema(
        summary=gettext_lazy("列出知识库"),
        description=gettext_lazy(
            "分页返回调用者可读取的知识库，按名称排序。公开知识库任何人可读，"
            "内部知识库需要登录，受限知识库需要属于其允许的用户组。"
            "`role` 是调用者在该知识库的角色；仅编辑者可见的字段（各用户组、"
            "领域词典、上线检查阈值）对读者为 `null`。"
        ),
        responses=KnowledgeBaseOutput(many=True),
    )
    def get(self, request: Request) -> Response:
        kbs = readable_knowledge_bases(request.user).select_related("active_version").prefetch_related(*ROLE_GROUPS)
        return self.page_of(kbs.order_by("name", "id"), KnowledgeBaseOutput, context={"user": request.user})

    @extend_schema(
        summary=gettext_lazy("创建知识库"),
        description=gettext_lazy(
            "需要 `knowledge.add_knowledgebase` 权限（否则 403 `create_knowledge_base_denied`）；"
            "不是超级用户的创建者必须把自己所在的一个用户组设为发布者组（400 `publisher_group_required`）。"
            "`id` 是知识库的标识（slug），已被使用时返回 409 `slug_taken`。"
            "向量模型与维度在创建时确定，之后不可更改；不传则使用部署的默认模型。"
        ),
        request=KnowledgeBaseCreateInput, responses={201: KnowledgeBaseOutput, **error_responses(409)},
    )
    def post(self, request: Request) -> Response:
        if not can_create_knowledge_base(request.user):
            raise Forbidden(_("你没有创建知识库的权限。"), code="create_knowledge_base_denied")
        data = _validated(KnowledgeBaseCreateInput, request.data)
        kb = catalog_services.create_knowledge_base(
            slug=data["id"], name=data["name"], description=data["description"],
            visibility=data["visibility"], allowed_groups=data["allowed_groups"],
            editor_groups=data["editor_groups"], publisher_groups=data["publisher_groups"],
            support_contact=data["support_contact"], chunk_size_tokens=data["chunk_size_tokens"],
            chunk_overlap_tokens=data["chunk_overlap_tokens"], embedding_model=data["embedding_model"],
            embedding_dimension=data["embedding_dimension"], custom_terms=data["custom_terms"],
            link_allowed_hosts=data["link_allowed_hosts"], actor=request.user,
        )
        return Response(KnowledgeBaseOutput(kb, context={"user": request.user}).data, status=status.HTTP_201_CREATED)


class KnowledgeBaseDetailView(APIView):
    @extend_schema(
        summary=gettext_lazy("获取知识库"),
        description=gettext_lazy("返回一个知识库的设置与当前生效版本号。不存在或无权读取时返回 404。"),
        responses=KnowledgeBaseOutput,
    )
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id)
        return Response(KnowledgeBaseOutput(kb, context={"user": request.user}).data)

    @extend_schema(
        summary=gettext_lazy("修改知识库设置"),
        description=gettext_lazy(
            "部分更新，只修改请求体中给出的字段。修改名称、描述、"
            "人工支持联系方式、领域词典需要编辑者角色；修改可见范围、"
            "各用户组、上线检查阈值（`release_max_regression_points`）、"
            "答案中可点击链接的域名（`link_allowed_hosts`）或网络搜索（`web_search_enabled`）需要发布者角色。"
            "新的领域词典立即作用于之后的提问；要让已入库的内容也按新词典分析，"
            "请调用 `POST …/reanalyse/`。"
        ),
        request=KnowledgeBaseUpdateInput, responses=KnowledgeBaseOutput,
    )
    def patch(self, request: Request, kb_id: str) -> Response:
        # Access first, from the fields the body names, and only then their values: a knowledge
        # base the caller may not read is missing whatever the body holds.
        named = request.data.keys() if isinstance(request.data, Mapping) else set()
        needs = Role.PUBLISHER if PUBLISHER_SETTINGS & named else Role.EDITOR
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, role=needs)
        data = _validated(KnowledgeBaseUpdateInput, request.data)
        kb = catalog_services.update_knowledge_base(kb=kb, actor=request.user, **data)
        return Response(KnowledgeBaseOutput(kb, context={"user": request.user}).data)


class VersionListView(_ListView):
    @extend_schema(
        summary=gettext_lazy("列出版本"),
        description=gettext_lazy(
            "从新到旧分页列出知识库的版本。编辑者看到全部版本（含草稿与已退役版本）；"
            "读者只看到当前生效的版本，版本说明 `notes` 对读者为 `null`。"
        ),
        responses=VersionOutput(many=True),
    )
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id)
        versions = readable_versions(user=request.user, kb=kb).select_related("based_on").order_by("-number")
        return self.page_of(versions, VersionOutput, context=_seen_by(request, kb))

    @extend_schema(
        summary=gettext_lazy("创建草稿版本"),
        description=gettext_lazy(
            "新建一个构建中（`building`）的草稿版本，包含当前生效版本的全部文档。"
            "同一知识库同时只能有一个草稿，已有时返回 409 `draft_exists`。"
            "通常不必手动创建：上传或删除文档时会自动创建草稿。需要编辑者角色。"
        ),
        request=VersionCreateInput, responses={201: VersionDetailOutput, **error_responses(409)},
    )
    def post(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, role=Role.EDITOR)
        data = _validated(VersionCreateInput, request.data)
        version = catalog_services.create_draft_version(kb=kb, actor=request.user, **data)
        return Response(VersionDetailOutput(version, context=_seen_by(request, kb)).data, status=status.HTTP_201_CREATED)


class VersionDetailView(APIView):
    @extend_schema(
        summary=gettext_lazy("获取版本详情"),
        description=gettext_lazy(
            "返回一个版本及其包含的文档 ID（`document_ids`）。读者只能读取当前生效的版本，"
            "其他版本返回 404。"
        ),
        responses=VersionDetailOutput,
    )
    def get(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number)
        return Response(VersionDetailOutput(version, context=_seen_by(request, version.knowledge_base)).data)


class VersionActivateView(APIView):
    @extend_schema(
        summary=gettext_lazy("发布版本"),
        description=gettext_lazy(
            "把一个就绪（`ready`）版本设为生效版本：切换生效版本、"
            "写入发布记录并使问答缓存失效，在同一事务中完成。需要发布者角色。"
            "版本不是就绪状态时返回 409。知识库设置了上线检查阈值时，"
            "若评测指标的退步超过阈值（或检查尚未完成）返回 409 `release_check_blocked`；"
            "设 `override_release_check: true` 并填写 `reason` 可强制发布（缺少原因返回 400 `override_needs_reason`），"
            "并记入发布记录。"
        ),
        request=ActivateInput, responses={200: ActivationOutput, **error_responses(409)},
    )
    def post(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number, role=Role.PUBLISHER)
        data = _validated(ActivateInput, request.data)
        activation = catalog_services.activate_version(
            version=version, actor=request.user, reason=data["reason"],
            override_release_check=data["override_release_check"],
        )
        return Response(ActivationOutput(activation).data)


class VersionRollbackView(APIView):
    @extend_schema(
        summary=gettext_lazy("回滚到此版本"),
        description=gettext_lazy(
            "把生效版本切回这个更早的就绪版本，写入发布记录并使问答缓存失效。"
            "需要发布者角色。知识库还没有生效版本（`no_active_version`）、"
            "或此版本不比当前生效版本早（`not_older_version`）时返回 409。"
        ),
        request=SwitchInput, responses={200: ActivationOutput, **error_responses(409)},
    )
    def post(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number, role=Role.PUBLISHER)
        data = _validated(SwitchInput, request.data)
        activation = catalog_services.rollback_version(
            kb=version.knowledge_base, to_version=version, actor=request.user, reason=data["reason"]
        )
        return Response(ActivationOutput(activation).data)


class VersionMarkReadyView(APIView):
    @extend_schema(
        summary=gettext_lazy("标记为就绪"),
        description=gettext_lazy(
            "把构建中的草稿标记为就绪（之后才能发布）：草稿必须至少包含一个文档，"
            "且其中的文档都已处理完成，否则返回 409。已就绪的版本原样返回。"
            "需要编辑者角色。"
        ),
        request=None, responses={200: VersionOutput, **error_responses(409)},
    )
    def post(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number, role=Role.EDITOR)
        version = readiness.mark_version_ready(version=version)
        return Response(VersionOutput(version, context=_seen_by(request, version.knowledge_base)).data)


class VersionRetireView(APIView):
    @extend_schema(
        summary=gettext_lazy("退役版本"),
        description=gettext_lazy(
            "退役一个不在生效中的版本。不再被任何保留版本包含的文档会被彻底删除（文件、"
            "分块与向量）。不能退役当前生效的版本（409 `version_active`）；"
            "已退役的版本原样返回。需要发布者角色。"
        ),
        request=None, responses={200: VersionOutput, **error_responses(409)},
    )
    def post(self, request: Request, kb_id: str, number: int) -> Response:
        # Retiring purges the documents no retained version holds: the publisher's call.
        version = access_version(user=request.user, kb_id=kb_id, number=number, role=Role.PUBLISHER)
        version = catalog_services.retire_version(version=version, actor=request.user)
        return Response(VersionOutput(version, context=_seen_by(request, version.knowledge_base)).data)


class KnowledgeBaseReanalyseView(APIView):
    """Apply the knowledge base's dictionary to its index, in the background (202)."""

    @extend_schema(
        summary=gettext_lazy("按领域词典重建索引"),
        description=gettext_lazy(
            "在后台用知识库当前的领域词典重新分析已入库的分块与 FAQ，"
            "立即返回 202；期间文档保持就绪、照常可检索。需要编辑者角色。"
            "创建时使用旧文本分析（Milvus jieba）的知识库不支持领域词典，"
            "返回 409 `legacy_text_analysis`。"
        ),
        request=None, responses={202: KnowledgeBaseOutput, **error_responses(409)},
    )
    def post(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, role=Role.EDITOR)
        document_services.schedule_reanalysis(kb=kb, actor=request.user)
        return Response(KnowledgeBaseOutput(kb, context={"user": request.user}).data, status=status.HTTP_202_ACCEPTED)


class ActivationListView(_ListView):
    @extend_schema(
        summary=gettext_lazy("列出发布记录"),
        description=gettext_lazy(
            "从新到旧分页列出知识库的发布与回滚记录：切换前后的版本号、"
            "操作人、原因、上线检查结果与缓存代次。需要编辑者角色。"
        ),
        responses={200: ActivationOutput(many=True), **error_responses(403)},
    )
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, role=Role.EDITOR)
        rows = kb.activations.select_related("from_version", "to_version", "actor").order_by("-created_at", "-id")
        return self.page_of(rows, ActivationOutput)


class DocumentListView(_ListView):
    # Uploads are multipart (as the schema says); a JSON body, say an array, was a 500 here.
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        summary=gettext_lazy("列出文档"),
        description=gettext_lazy(
            "从新到旧分页列出知识库的文档及其处理状态，可用 `status` 只看某一状态的文档。"
            "编辑者看到全部文档（含处理中与失败的）；读者只看到当前生效版本中的文档，"
            "文件指纹与失败详情对读者为 `null`。未知的 `status` 返回 400 `invalid_status`。"
        ),
        parameters=[OpenApiParameter("status", str, enum=DocumentStatus.values, description=gettext_lazy("只返回处于此状态的文档。"))],
        responses=DocumentOutput(many=True),
    )
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id)
        documents = readable_documents(user=request.user, kb=kb)
        wanted_status = request.query_params.get("status")
        if wanted_status:
            if wanted_status not in DocumentStatus.values:
                raise ValidationFailed(_("未知状态：%(s)s") % {"s": wanted_status}, code="invalid_status")
            documents = documents.filter(status=wanted_status)
        return self.page_of(documents.order_by("-created_at", "-id"), DocumentOutput, context=_seen_by(request, kb))

    @extend_schema(
        summary=gettext_lazy("上传文档"),
        description=gettext_lazy(
            "以 `multipart/form-data` 上传一个或多个文件（字段 `files`，"
            "也接受 `file`），加入草稿版本后在后台解析、切分并向量化；"
            "用 `GET …/documents/{document_id}/` 查看进度。先校验全部文件："
            "任一文件不合格则整次上传被拒绝并逐个说明原因，不会只入库一部分。"
            "文件数与大小受部署限制（`RAG_MAX_FILES_PER_UPLOAD`，"
            "默认 50 个；`RAG_MAX_UPLOAD_BYTES`，默认 50 MB），超出返回 400 或 413。"
            "内容已存在的文件不会重复入库，返回已有的文档并标记 `duplicate: true`。"
            "需要编辑者角色。"
        ),
        request={"multipart/form-data": DocumentUploadInput},
        responses={201: UploadOutcomeOutput(many=True), **error_responses(409)},
    )
    def post(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, role=Role.EDITOR)
        files = request.FILES.getlist("files") + request.FILES.getlist("file")
        fields = {"files": files, "source_tag": request.data.get("source_tag", "")}
        if "attributes" in request.data:
            fields["attributes"] = request.data["attributes"]
        data = _validated(DocumentUploadInput, fields)
        outcomes = document_services.upload_documents(
            kb=kb, files=data["files"], source_tag=data["source_tag"], attributes=data["attributes"], actor=request.user
        )
        return Response(UploadOutcomeOutput(outcomes, many=True, context=_seen_by(request, kb)).data, status=status.HTTP_201_CREATED)


class DocumentDetailView(APIView):
    @extend_schema(
        summary=gettext_lazy("获取文档"),
        description=gettext_lazy(
            "返回一个文档及其处理状态（`status`、分块数、已向量化的分块数）。"
            "读者只能读取生效版本中的文档，其他返回 404。"
        ),
        responses=DocumentOutput,
    )
    def get(self, request: Request, kb_id: str, document_id: int) -> Response:
        document = access_document(user=request.user, kb_id=kb_id, document_id=document_id)
        return Response(DocumentOutput(document, context=_seen_by(request, document.knowledge_base)).data)

    @extend_schema(
        summary=gettext_lazy("修改文档元数据"),
        description=gettext_lazy(
            "整体替换文档的元数据 `attributes`（`{}` 表示清空；不传则不变），"
            "检索与问答的元数据过滤立即按新值生效。需要编辑者角色。"
        ),
        request=DocumentUpdateInput, responses={200: DocumentOutput},
    )
    def patch(self, request: Request, kb_id: str, document_id: int) -> Response:
        document = access_document(user=request.user, kb_id=kb_id, document_id=document_id, role=Role.EDITOR)
        data = _validated(DocumentUpdateInput, request.data)
        if "attributes" in data:
            document = document_services.set_document_attributes(
                document=document, attributes=data["attributes"], actor=request.user
            )
        return Response(DocumentOutput(document, context=_seen_by(request, document.knowledge_base)).data)

    @extend_schema(
        summary=gettext_lazy("删除文档"),
        description=gettext_lazy(
            "把文档从草稿版本中移除。已发布的版本不可变：文档在其中保留到该版本退役为止，"
            "`retained_by_versions` 列出这些版本号。不再被任何保留版本包含时，"
            "文件、分块与向量被彻底删除（`purged: true`）。需要编辑者角色。"
        ),
        responses={200: DocumentDeletionOutput},
    )
    def delete(self, request: Request, kb_id: str, document_id: int) -> Response:
        document = access_document(user=request.user, kb_id=kb_id, document_id=document_id, role=Role.EDITOR)
        outcome = catalog_services.delete_document(document=document, actor=request.user)
        return Response(
            {
                "removed_from_draft": outcome.removed_from_draft,
                "purged": outcome.purged,
                "retained_by_versions": list(outcome.retained_by),
            }
        )


class DocumentRetryView(APIView):
    @extend_schema(
        summary=gettext_lazy("重试失败的文档"),
        description=gettext_lazy(
            "把处理失败（`failed`）的文档重新排队处理，尝试次数重新计算。"
            "其他状态的文档返回 409 `document_not_failed`。需要编辑者角色。"
        ),
        request=None, responses={200: DocumentOutput, **error_responses(409)},
    )
    def post(self, request: Request, kb_id: str, document_id: int) -> Response:
        document = access_document(user=request.user, kb_id=kb_id, document_id=document_id, role=Role.EDITOR)
        document = document_services.retry_document(document=document, actor=request.user)
        return Response(DocumentOutput(document, context=_seen_by(request, document.knowledge_base)).data)


class FAQListView(_ListView):
    @extend_schema(
        summary=gettext_lazy("列出 FAQ"),
        description=gettext_lazy(
            "按标准问题排序分页列出常见问题。编辑者看到全部 FAQ（含停用的）"
            "与命中次数；读者只看到启用的 FAQ，命中次数为 `null`。"
        ),
        responses=FAQOutput(many=True),
    )
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id)
        faqs = readable_faqs(user=request.user, kb=kb)
        return self.page_of(faqs.order_by("question", "id"), FAQOutput, context=_seen_by(request, kb))

    @extend_schema(
        summary=gettext_lazy("新建 FAQ"),
        description=gettext_lazy(
            "新建一条常见问题：标准问题、相似问题（最多 49 个）与 Markdown 答案。"
            "与提问高度匹配的启用 FAQ 会直接作为答案。已有相同的标准问题时返回 409 `faq_duplicate`。"
            "需要编辑者角色。"
        ),
        request=FAQInput, responses={201: FAQOutput, **error_responses(409)},
    )
    def post(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, role=Role.EDITOR)
        data = _validated(FAQInput, request.data)
        faq = faq_services.save_faq(kb=kb, actor=request.user, **data)
        return Response(FAQOutput(faq, context=_seen_by(request, kb)).data, status=status.HTTP_201_CREATED)


class FAQDetailView(APIView):
    @extend_schema(
        summary=gettext_lazy("获取 FAQ"),
        description=gettext_lazy("返回一条常见问题。读者读取停用的 FAQ 时返回 404。"),
        responses=FAQOutput,
    )
    def get(self, request: Request, kb_id: str, faq_id: int) -> Response:
        faq = access_faq(user=request.user, kb_id=kb_id, faq_id=faq_id)
        return Response(FAQOutput(faq, context=_seen_by(request, faq.knowledge_base)).data)

    @extend_schema(
        summary=gettext_lazy("替换 FAQ"),
        description=gettext_lazy(
            "整体替换一条常见问题，未给出的可选字段恢复默认值。与另一条 FAQ 的标准问题相同时返"
            "回 409 `faq_duplicate`。需要编辑者角色。"
        ),
        request=FAQInput, responses={200: FAQOutput, **error_responses(409)},
    )
    def put(self, request: Request, kb_id: str, faq_id: int) -> Response:
        faq = access_faq(user=request.user, kb_id=kb_id, faq_id=faq_id, role=Role.EDITOR)
        data = _validated(FAQInput, request.data)
        faq = faq_services.save_faq(kb=faq.knowledge_base, faq=faq, actor=request.user, **data)
        return Response(FAQOutput(faq, context=_seen_by(request, faq.knowledge_base)).data)

    @extend_schema(
        summary=gettext_lazy("修改 FAQ"),
        description=gettext_lazy(
            "部分更新一条常见问题，只修改请求体中给出的字段。与另一条 FAQ 的标准问题相同时返回"
            " 409 `faq_duplicate`。需要编辑者角色。"
        ),
        request=FAQInput, responses={200: FAQOutput, **error_responses(409)},
    )
    def patch(self, request: Request, kb_id: str, faq_id: int) -> Response:
        faq = access_faq(user=request.user, kb_id=kb_id, faq_id=faq_id, role=Role.EDITOR)
        changes = _validated(FAQInput, request.data, partial=True)
        current = {
            "question": faq.question, "similar_questions": faq.similar_questions,
            "answer": faq.answer, "source_tag": faq.source_tag, "enabled": faq.enabled,
        }
        data = {**current, **changes}
        faq = faq_services.save_faq(kb=faq.knowledge_base, faq=faq, actor=request.user, **data)
        return Response(FAQOutput(faq, context=_seen_by(request, faq.knowledge_base)).data)

    @extend_schema(
        summary=gettext_lazy("删除 FAQ"),
        description=gettext_lazy("删除一条常见问题，成功返回 204。需要编辑者角色。"),
        responses={204: OpenApiResponse(description=gettext_lazy("已删除，无响应体。"))},
    )
    def delete(self, request: Request, kb_id: str, faq_id: int) -> Response:
        faq = access_faq(user=request.user, kb_id=kb_id, faq_id=faq_id, role=Role.EDITOR)
        faq_services.delete_faq(faq=faq, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class CacheInvalidateView(APIView):
    @extend_schema(
        summary=gettext_lazy("清除问答缓存"),
        description=gettext_lazy(
            "使一个知识库的检索与答案缓存全部失效（递增其缓存代次 `cache_epoch`），"
            "之后的提问重新检索与生成。需要该知识库的编辑者角色，"
            "操作记入审计日志。"
        ),
        request=CacheInvalidateInput, responses={200: CacheInvalidateOutput, **error_responses(404)},
    )
    def post(self, request: Request) -> Response:
        # A serializer, not request.data.get: a body that is a JSON array or string is a 400 too.
        kb_id = _validated(CacheInvalidateInput, request.data)["knowledge_base_id"]
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, role=Role.EDITOR)
        epoch = catalog_services.invalidate_cache(kb=kb, actor=request.user)
        return Response({"knowledge_base_id": kb.slug, "cache_epoch": epoch})
