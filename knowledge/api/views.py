"""Knowledge API: thin views — validate, call one service or selector, serialize."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django.utils.translation import gettext as _

from ragsite.errors import Forbidden, ValidationFailed

from .. import services
from ..access import (
    access_document,
    access_faq,
    access_knowledge_base,
    access_version,
    is_manager,
    published_documents,
    readable_knowledge_bases,
)
from ..models import Document, DocumentStatus
from .serializers import (
    ActivateInput,
    ActivationOutput,
    DocumentOutput,
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


def _validated(serializer_class, data, **kwargs) -> dict:
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class KnowledgeBaseListView(APIView):
    @extend_schema(responses=KnowledgeBaseOutput(many=True))
    def get(self, request: Request) -> Response:
        kbs = readable_knowledge_bases(request.user).select_related("active_version").prefetch_related("allowed_groups")
        return Response(KnowledgeBaseOutput(kbs, many=True).data)

    @extend_schema(request=KnowledgeBaseCreateInput, responses={201: KnowledgeBaseOutput})
    def post(self, request: Request) -> Response:
        if not is_manager(request.user):
            raise Forbidden(_("只有管理员可以创建知识库。"))
        data = _validated(KnowledgeBaseCreateInput, request.data)
        kb = services.create_knowledge_base(
            slug=data["id"], name=data["name"], description=data["description"],
            visibility=data["visibility"], allowed_groups=data["allowed_groups"],
            support_contact=data["support_contact"], chunk_size_tokens=data["chunk_size_tokens"],
            chunk_overlap_tokens=data["chunk_overlap_tokens"], embedding_model=data["embedding_model"],
            embedding_dimension=data["embedding_dimension"], custom_terms=data["custom_terms"],
            actor=request.user,
        )
        return Response(KnowledgeBaseOutput(kb).data, status=status.HTTP_201_CREATED)


class KnowledgeBaseDetailView(APIView):
    @extend_schema(responses=KnowledgeBaseOutput)
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id)
        return Response(KnowledgeBaseOutput(kb).data)

    @extend_schema(request=KnowledgeBaseUpdateInput, responses=KnowledgeBaseOutput)
    def patch(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, manage=True)
        data = _validated(KnowledgeBaseUpdateInput, request.data)
        kb = services.update_knowledge_base(kb=kb, actor=request.user, **data)
        return Response(KnowledgeBaseOutput(kb).data)


class VersionListView(APIView):
    @extend_schema(responses=VersionOutput(many=True))
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id)
        versions = kb.versions.select_related("based_on").order_by("-number")
        return Response(VersionOutput(versions, many=True).data)

    @extend_schema(request=VersionCreateInput, responses={201: VersionDetailOutput})
    def post(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, manage=True)
        data = _validated(VersionCreateInput, request.data)
        version = services.create_draft_version(kb=kb, actor=request.user, **data)
        return Response(VersionDetailOutput(version).data, status=status.HTTP_201_CREATED)


class VersionDetailView(APIView):
    @extend_schema(responses=VersionDetailOutput)
    def get(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number)
        return Response(VersionDetailOutput(version).data)


class VersionActivateView(APIView):
    @extend_schema(request=ActivateInput, responses=ActivationOutput)
    def post(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number, manage=True)
        data = _validated(ActivateInput, request.data)
        activation = services.activate_version(
            version=version, actor=request.user, reason=data["reason"],
            override_release_check=data["override_release_check"],
        )
        return Response(ActivationOutput(activation).data)


class VersionRollbackView(APIView):
    @extend_schema(request=SwitchInput, responses=ActivationOutput)
    def post(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number, manage=True)
        data = _validated(SwitchInput, request.data)
        activation = services.rollback_version(
            kb=version.knowledge_base, to_version=version, actor=request.user, reason=data["reason"]
        )
        return Response(ActivationOutput(activation).data)


class VersionMarkReadyView(APIView):
    @extend_schema(request=None, responses=VersionOutput)
    def post(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number, manage=True)
        return Response(VersionOutput(services.mark_version_ready(version=version)).data)


class VersionRetireView(APIView):
    @extend_schema(request=None, responses=VersionOutput)
    def post(self, request: Request, kb_id: str, number: int) -> Response:
        version = access_version(user=request.user, kb_id=kb_id, number=number, manage=True)
        return Response(VersionOutput(services.retire_version(version=version, actor=request.user)).data)


class KnowledgeBaseReanalyseView(APIView):
    """Apply the knowledge base's dictionary to its index, in the background (202)."""

    @extend_schema(request=None, responses={202: KnowledgeBaseOutput})
    def post(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, manage=True)
        services.schedule_reanalysis(kb=kb, actor=request.user)
        return Response(KnowledgeBaseOutput(kb).data, status=status.HTTP_202_ACCEPTED)


class ActivationListView(APIView):
    @extend_schema(responses=ActivationOutput(many=True))
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, manage=True)
        rows = kb.activations.select_related("from_version", "to_version", "actor")[:200]
        return Response(ActivationOutput(rows, many=True).data)


class DocumentListView(APIView):
    parser_classes = [MultiPartParser, FormParser, JSONParser]

    @extend_schema(responses=DocumentOutput(many=True))
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id)
        documents = Document.objects.filter(knowledge_base=kb)
        if not is_manager(request.user):
            documents = published_documents(documents, kb)
        wanted_status = request.query_params.get("status")
        if wanted_status:
            if wanted_status not in DocumentStatus.values:
                raise ValidationFailed(_("未知状态：%(s)s") % {"s": wanted_status}, code="invalid_status")
            documents = documents.filter(status=wanted_status)
        return Response(DocumentOutput(documents.order_by("-created_at", "-id"), many=True).data)

    @extend_schema(request={"multipart/form-data": DocumentUploadInput}, responses={201: UploadOutcomeOutput(many=True)})
    def post(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, manage=True)
        files = request.FILES.getlist("files") + request.FILES.getlist("file")
        data = _validated(
            DocumentUploadInput,
            {"files": files, "source_tag": request.data.get("source_tag", "")},
        )
        outcomes = services.upload_documents(
            kb=kb, files=data["files"], source_tag=data["source_tag"], actor=request.user
        )
        return Response(UploadOutcomeOutput(outcomes, many=True).data, status=status.HTTP_201_CREATED)


class DocumentDetailView(APIView):
    @extend_schema(responses=DocumentOutput)
    def get(self, request: Request, kb_id: str, document_id: int) -> Response:
        document = access_document(user=request.user, kb_id=kb_id, document_id=document_id)
        return Response(DocumentOutput(document).data)

    @extend_schema(responses={200: None})
    def delete(self, request: Request, kb_id: str, document_id: int) -> Response:
        document = access_document(user=request.user, kb_id=kb_id, document_id=document_id, manage=True)
        outcome = services.delete_document(document=document, actor=request.user)
        return Response(
            {
                "removed_from_draft": outcome.removed_from_draft,
                "purged": outcome.purged,
                "retained_by_versions": list(outcome.retained_by),
            }
        )


class DocumentRetryView(APIView):
    @extend_schema(request=None, responses=DocumentOutput)
    def post(self, request: Request, kb_id: str, document_id: int) -> Response:
        document = access_document(user=request.user, kb_id=kb_id, document_id=document_id, manage=True)
        return Response(DocumentOutput(services.retry_document(document=document, actor=request.user)).data)


class FAQListView(APIView):
    @extend_schema(responses=FAQOutput(many=True))
    def get(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id)
        faqs = kb.faqs.all() if is_manager(request.user) else kb.faqs.filter(enabled=True)
        return Response(FAQOutput(faqs.order_by("question"), many=True).data)

    @extend_schema(request=FAQInput, responses={201: FAQOutput})
    def post(self, request: Request, kb_id: str) -> Response:
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, manage=True)
        data = _validated(FAQInput, request.data)
        faq = services.save_faq(kb=kb, actor=request.user, **data)
        return Response(FAQOutput(faq).data, status=status.HTTP_201_CREATED)


class FAQDetailView(APIView):
    @extend_schema(responses=FAQOutput)
    def get(self, request: Request, kb_id: str, faq_id: int) -> Response:
        return Response(FAQOutput(access_faq(user=request.user, kb_id=kb_id, faq_id=faq_id)).data)

    @extend_schema(request=FAQInput, responses=FAQOutput)
    def put(self, request: Request, kb_id: str, faq_id: int) -> Response:
        faq = access_faq(user=request.user, kb_id=kb_id, faq_id=faq_id, manage=True)
        data = _validated(FAQInput, request.data)
        return Response(FAQOutput(services.save_faq(kb=faq.knowledge_base, faq=faq, actor=request.user, **data)).data)

    @extend_schema(request=FAQInput, responses=FAQOutput)
    def patch(self, request: Request, kb_id: str, faq_id: int) -> Response:
        faq = access_faq(user=request.user, kb_id=kb_id, faq_id=faq_id, manage=True)
        changes = _validated(FAQInput, request.data, partial=True)
        current = {
            "question": faq.question, "similar_questions": faq.similar_questions,
            "answer": faq.answer, "source_tag": faq.source_tag, "enabled": faq.enabled,
        }
        data = {**current, **changes}
        return Response(FAQOutput(services.save_faq(kb=faq.knowledge_base, faq=faq, actor=request.user, **data)).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, kb_id: str, faq_id: int) -> Response:
        faq = access_faq(user=request.user, kb_id=kb_id, faq_id=faq_id, manage=True)
        services.delete_faq(faq=faq, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class CacheInvalidateView(APIView):
    @extend_schema(request=None, responses={200: None})
    def post(self, request: Request) -> Response:
        kb_id = request.data.get("knowledge_base_id")
        if not kb_id or not isinstance(kb_id, str):
            raise ValidationFailed(_("knowledge_base_id 必填。"), code="invalid_request")
        kb = access_knowledge_base(user=request.user, kb_id=kb_id, manage=True)
        epoch = services.invalidate_cache(kb=kb, actor=request.user)
        return Response({"knowledge_base_id": kb.slug, "cache_epoch": epoch})
