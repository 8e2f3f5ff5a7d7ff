"""Knowledge API: thin views — validate, call one service or selector, serialize."""

from __future__ import annotations

from collections.abc import Mapping

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.generics import GenericAPIView
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django.utils.translation import gettext as _

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
# which links readers may follow out of an answer.
PUBLISHER_SETTINGS = {
    "visibility", "allowed_groups", "editor_groups", "publisher_groups", "release_max_regression_points",
    "link_allowed_hosts",
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
    @extend_schema(responses=KnowledgeBaseOutput(many=True))
    def get(self, request: Request) -> Response:
        kbs = readable_knowledge_bases(request.user).select_related("active_version").prefetch_related(*ROLE_GROUPS)
        return self.page_of(kbs.order_by("name", "id"), KnowledgeBaseOutput, context={"user": request.user})

    @extend_schema(request=KnowledgeBaseCreateInput, responses={201: KnowledgeBaseOutput, **error_responses(409)})
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
    @extend_schema(responses=KnowledgeBaseOutput)
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id)
        return Response(KnowledgeBaseOutput(kb, context={"user": request.user}).data)

    @extend_schema(request=KnowledgeBaseUpdateInput, responses=KnowledgeBaseOutput)
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
    @extend_schema(responses=VersionOutput(many=True))
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id)
        versions = readable_versions(user=request.user, kb=kb).select_related("based_on").order_by("-number")
        return self.page_of(versions, VersionOutput, context=_seen_by(request, kb))

    @extend_schema(request=VersionCreateInput, responses={201: VersionDetailOutput, **error_responses(409)})
    def post(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, role=Role.EDITOR)
        data = _validated(VersionCreateInput, request.data)
        version = catalog_services.create_draft_version(kb=kb, actor=request.user, **data)
        return Response(VersionDetailOutput(version, context=_seen_by(request, kb)).data, status=status.HTTP_201_CREATED)


class VersionDetailView(APIView):
    @extend_schema(responses=VersionDetailOutput)
    def get(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number)
        return Response(VersionDetailOutput(version, context=_seen_by(request, version.knowledge_base)).data)


class VersionActivateView(APIView):
    @extend_schema(request=ActivateInput, responses={200: ActivationOutput, **error_responses(409)})
    def post(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number, role=Role.PUBLISHER)
        data = _validated(ActivateInput, request.data)
        activation = catalog_services.activate_version(
            version=version, actor=request.user, reason=data["reason"],
            override_release_check=data["override_release_check"],
        )
        return Response(ActivationOutput(activation).data)


class VersionRollbackView(APIView):
    @extend_schema(request=SwitchInput, responses={200: ActivationOutput, **error_responses(409)})
    def post(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number, role=Role.PUBLISHER)
        data = _validated(SwitchInput, request.data)
        activation = catalog_services.rollback_version(
            kb=version.knowledge_base, to_version=version, actor=request.user, reason=data["reason"]
        )
        return Response(ActivationOutput(activation).data)


class VersionMarkReadyView(APIView):
    @extend_schema(request=None, responses={200: VersionOutput, **error_responses(409)})
    def post(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number, role=Role.EDITOR)
        version = readiness.mark_version_ready(version=version)
        return Response(VersionOutput(version, context=_seen_by(request, version.knowledge_base)).data)


class VersionRetireView(APIView):
    @extend_schema(request=None, responses={200: VersionOutput, **error_responses(409)})
    def post(self, request: Request, kb_id: str, number: int) -> Response:
        # Retiring purges the documents no retained version holds: the publisher's call.
        version = access_version(user=request.user, kb_id=kb_id, number=number, role=Role.PUBLISHER)
        version = catalog_services.retire_version(version=version, actor=request.user)
        return Response(VersionOutput(version, context=_seen_by(request, version.knowledge_base)).data)


class KnowledgeBaseReanalyseView(APIView):
    """Apply the knowledge base's dictionary to its index, in the background (202)."""

    @extend_schema(request=None, responses={202: KnowledgeBaseOutput, **error_responses(409)})
    def post(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, role=Role.EDITOR)
        document_services.schedule_reanalysis(kb=kb, actor=request.user)
        return Response(KnowledgeBaseOutput(kb, context={"user": request.user}).data, status=status.HTTP_202_ACCEPTED)


class ActivationListView(_ListView):
    @extend_schema(responses={200: ActivationOutput(many=True), **error_responses(403)})
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, role=Role.EDITOR)
        rows = kb.activations.select_related("from_version", "to_version", "actor").order_by("-created_at", "-id")
        return self.page_of(rows, ActivationOutput)


class DocumentListView(_ListView):
    # Uploads are multipart (as the schema says); a JSON body, say an array, was a 500 here.
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema(
        parameters=[OpenApiParameter("status", str, enum=DocumentStatus.values, description="Only documents in this state.")],
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
    @extend_schema(responses=DocumentOutput)
    def get(self, request: Request, kb_id: str, document_id: int) -> Response:
        document = access_document(user=request.user, kb_id=kb_id, document_id=document_id)
        return Response(DocumentOutput(document, context=_seen_by(request, document.knowledge_base)).data)

    @extend_schema(request=DocumentUpdateInput, responses={200: DocumentOutput})
    def patch(self, request: Request, kb_id: str, document_id: int) -> Response:
        document = access_document(user=request.user, kb_id=kb_id, document_id=document_id, role=Role.EDITOR)
        data = _validated(DocumentUpdateInput, request.data)
        if "attributes" in data:
            document = document_services.set_document_attributes(
                document=document, attributes=data["attributes"], actor=request.user
            )
        return Response(DocumentOutput(document, context=_seen_by(request, document.knowledge_base)).data)

    @extend_schema(responses={200: DocumentDeletionOutput})
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
    @extend_schema(request=None, responses={200: DocumentOutput, **error_responses(409)})
    def post(self, request: Request, kb_id: str, document_id: int) -> Response:
        document = access_document(user=request.user, kb_id=kb_id, document_id=document_id, role=Role.EDITOR)
        document = document_services.retry_document(document=document, actor=request.user)
        return Response(DocumentOutput(document, context=_seen_by(request, document.knowledge_base)).data)


class FAQListView(_ListView):
    @extend_schema(responses=FAQOutput(many=True))
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id)
        faqs = readable_faqs(user=request.user, kb=kb)
        return self.page_of(faqs.order_by("question", "id"), FAQOutput, context=_seen_by(request, kb))

    @extend_schema(request=FAQInput, responses={201: FAQOutput, **error_responses(409)})
    def post(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, role=Role.EDITOR)
        data = _validated(FAQInput, request.data)
        faq = faq_services.save_faq(kb=kb, actor=request.user, **data)
        return Response(FAQOutput(faq, context=_seen_by(request, kb)).data, status=status.HTTP_201_CREATED)


class FAQDetailView(APIView):
    @extend_schema(responses=FAQOutput)
    def get(self, request: Request, kb_id: str, faq_id: int) -> Response:
        faq = access_faq(user=request.user, kb_id=kb_id, faq_id=faq_id)
        return Response(FAQOutput(faq, context=_seen_by(request, faq.knowledge_base)).data)

    @extend_schema(request=FAQInput, responses={200: FAQOutput, **error_responses(409)})
    def put(self, request: Request, kb_id: str, faq_id: int) -> Response:
        faq = access_faq(user=request.user, kb_id=kb_id, faq_id=faq_id, role=Role.EDITOR)
        data = _validated(FAQInput, request.data)
        faq = faq_services.save_faq(kb=faq.knowledge_base, faq=faq, actor=request.user, **data)
        return Response(FAQOutput(faq, context=_seen_by(request, faq.knowledge_base)).data)

    @extend_schema(request=FAQInput, responses={200: FAQOutput, **error_responses(409)})
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

    @extend_schema(responses={204: None})
    def delete(self, request: Request, kb_id: str, faq_id: int) -> Response:
        faq = access_faq(user=request.user, kb_id=kb_id, faq_id=faq_id, role=Role.EDITOR)
        faq_services.delete_faq(faq=faq, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class CacheInvalidateView(APIView):
    @extend_schema(request=CacheInvalidateInput, responses={200: CacheInvalidateOutput, **error_responses(404)})
    def post(self, request: Request) -> Response:
        # A serializer, not request.data.get: a body that is a JSON array or string is a 400 too.
        kb_id = _validated(CacheInvalidateInput, request.data)["knowledge_base_id"]
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, role=Role.EDITOR)
        epoch = catalog_services.invalidate_cache(kb=kb, actor=request.user)
        return Response({"knowledge_base_id": kb.slug, "cache_epoch": epoch})
