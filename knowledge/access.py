"""Permission-checked fetches. Every view and consumer reaches knowledge through these.

Reading follows the knowledge base's visibility: `public` for anyone, `internal` for any signed-in
user, `restricted` for members of its allowed groups. Staff read and manage everything.
A knowledge base the user may not read is reported as not found, so its existence is not leaked.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet
from django.utils.translation import gettext as _

from ragsite.errors import Forbidden, NotFound

from .models import FAQ, Chunk, Document, DocumentAsset, KnowledgeBase, KnowledgeBaseVersion, Visibility

User = AbstractBaseUser | AnonymousUser


def is_manager(user: User | None) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.is_staff)


def readable_knowledge_bases(user: User | None) -> QuerySet[KnowledgeBase]:
    queryset = KnowledgeBase.objects.all()
    if is_manager(user):
        return queryset
    if user is None or not user.is_authenticated or not user.is_active:
        return queryset.filter(visibility=Visibility.PUBLIC)
    return queryset.filter(
        Q(visibility__in=[Visibility.PUBLIC, Visibility.INTERNAL])
        | Q(visibility=Visibility.RESTRICTED, allowed_groups__in=user.groups.all())
    ).distinct()


def can_read_knowledge_base(user: User | None, kb: KnowledgeBase) -> bool:
    if is_manager(user) or kb.visibility == Visibility.PUBLIC:
        return True
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    if kb.visibility == Visibility.INTERNAL:
        return True
    return kb.allowed_groups.filter(pk__in=user.groups.values("pk")).exists()


def access_knowledge_base(*, user: User | None, kb_id: str, manage: bool = False) -> KnowledgeBase:
    """The knowledge base with slug `kb_id`, or NotFound / Forbidden."""
    kb = KnowledgeBase.objects.filter(slug=kb_id).select_related("active_version").first()
    if kb is None or not can_read_knowledge_base(user, kb):
        raise NotFound(
            _("知识库 %(kb)s 不存在或无权访问。") % {"kb": kb_id}, code="knowledge_base_not_found"
        )
    if manage and not is_manager(user):
        raise Forbidden(_("只有管理员可以管理知识库。"))
    return kb


def access_version(
    *, user: User | None, kb_id: str, number: int, manage: bool = False
) -> KnowledgeBaseVersion:
    kb = access_knowledge_base(user=user, kb_id=kb_id, manage=manage)
    version = KnowledgeBaseVersion.objects.filter(knowledge_base=kb, number=number).first()
    if version is None:
        raise NotFound(_("版本 v%(number)s 不存在。") % {"number": number}, code="version_not_found")
    return version


def access_document(
    *, user: User | None, kb_id: str, document_id: int, manage: bool = False
) -> Document:
    kb = access_knowledge_base(user=user, kb_id=kb_id, manage=manage)
    documents = Document.objects.filter(knowledge_base=kb, pk=document_id)
    if not is_manager(user):
        # Readers see what answers draw on: the published version, nothing in preparation.
        documents = published_documents(documents, kb)
    document = documents.first()
    if document is None:
        raise NotFound(_("文档 %(id)s 不存在。") % {"id": document_id}, code="document_not_found")
    return document


def published_documents(queryset: QuerySet[Document], kb: KnowledgeBase) -> QuerySet[Document]:
    if kb.active_version_id is None:
        return queryset.none()
    return queryset.filter(versions=kb.active_version_id)


def access_asset(*, user: User | None, asset_id: int):
    """An image asset, readable when its document is readable (published, or the user manages)."""
    asset = DocumentAsset.objects.select_related("document__knowledge_base").filter(pk=asset_id).first()
    if asset is not None:
        kb = asset.document.knowledge_base
        if can_read_knowledge_base(user, kb) and (
            is_manager(user) or published_documents(Document.objects.filter(pk=asset.document_id), kb).exists()
        ):
            return asset
    raise NotFound(_("资源 %(id)s 不存在或无权访问。") % {"id": asset_id}, code="asset_not_found")


def access_chunk(*, user: User | None, chunk_id: int):
    """A chunk, readable when its document is readable (published, or the user manages)."""
    chunk = Chunk.objects.select_related("document__knowledge_base").filter(pk=chunk_id).first()
    if chunk is not None:
        kb = chunk.document.knowledge_base
        if can_read_knowledge_base(user, kb) and (
            is_manager(user) or published_documents(Document.objects.filter(pk=chunk.document_id), kb).exists()
        ):
            return chunk
    raise NotFound(_("分块 %(id)s 不存在或无权访问。") % {"id": chunk_id}, code="chunk_not_found")


def access_faq(*, user: User | None, kb_id: str, faq_id: int, manage: bool = False) -> FAQ:
    kb = access_knowledge_base(user=user, kb_id=kb_id, manage=manage)
    faqs = FAQ.objects.filter(knowledge_base=kb, pk=faq_id)
    if not is_manager(user):
        faqs = faqs.filter(enabled=True)  # a disabled FAQ is work in progress, like a draft
    faq = faqs.first()
    if faq is None:
        raise NotFound(_("FAQ %(id)s 不存在。") % {"id": faq_id}, code="faq_not_found")
    return faq
