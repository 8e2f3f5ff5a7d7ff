"""Permission-checked fetches. Every view, consumer and admin page reaches knowledge through these.

Each user has one role per knowledge base, separate from "is staff":

- reader, by the knowledge base's visibility: `public` for anyone, `internal` for any signed-in
  user, `restricted` for members of its allowed groups; readers see the published version only;
- editor (`editor_groups`): also drafts, documents in preparation, FAQs, ingestion progress,
  hit tests, traces and evaluations of that knowledge base;
- publisher (`publisher_groups`): also publishing, rollback, retiring (which purges), access
  control and deletion;
- superusers hold every role everywhere.

A knowledge base the user may not read is reported as not found, so its existence is not leaked;
one they may read but not change answers 403.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils.translation import gettext as _

from ragsite.errors import Forbidden, NotFound

from knowledge.models import FAQ, Chunk, Document, DocumentAsset, KnowledgeBase, KnowledgeBaseVersion, Visibility

User = AbstractBaseUser | AnonymousUser


class Role(enum.IntEnum):
    NONE = 0
    READER = 1
    EDITOR = 2
    PUBLISHER = 3


def _signed_in(user: User | None) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active)


def is_superuser(user: User | None) -> bool:
    return _signed_in(user) and bool(user.is_superuser)


def _group_ids(user: User | None) -> frozenset[int]:
    if not _signed_in(user):
        return frozenset()
    # Kept on the user object like Django's own permission cache: one query per request.
    cached = getattr(user, "_knowledge_group_ids", None)
    if cached is None:
        cached = frozenset(user.groups.values_list("pk", flat=True))
        user._knowledge_group_ids = cached
    return cached


def role_in(user: User | None, kb: KnowledgeBase) -> Role:
    if is_superuser(user):
        return Role.PUBLISHER
    if user is None:
        return _role_in(user, kb)
    roles = getattr(user, "_knowledge_roles", None)
    if roles is None:
        roles = user._knowledge_roles = {}
    key = (kb.pk, kb.visibility)
    if key not in roles:
        roles[key] = _role_in(user, kb)
    return roles[key]


def _role_in(user: User | None, kb: KnowledgeBase) -> Role:
    groups = _group_ids(user)
    if groups:
        if _holds_group(kb, "publisher_groups", groups):
            return Role.PUBLISHER
        if _holds_group(kb, "editor_groups", groups):
            return Role.EDITOR
    if kb.visibility == Visibility.PUBLIC:
        return Role.READER
    if not _signed_in(user):
        return Role.NONE
    if kb.visibility == Visibility.INTERNAL or (groups and _holds_group(kb, "allowed_groups", groups)):
        return Role.READER
    return Role.NONE


# Lists prefetch these, so a page of knowledge bases costs no query per row to label roles.
ROLE_GROUPS = ("allowed_groups", "editor_groups", "publisher_groups")


def _holds_group(kb: KnowledgeBase, relation: str, groups: frozenset[int]) -> bool:
    prefetched = getattr(kb, "_prefetched_objects_cache", {})
    if relation in prefetched:
        return any(group.pk in groups for group in prefetched[relation])
    return getattr(kb, relation).filter(pk__in=groups).exists()


def knowledge_bases_with_role(user: User | None, role: Role) -> QuerySet[KnowledgeBase]:
    """Every knowledge base on which `user` holds at least `role`."""
    queryset = KnowledgeBase.objects.all()
    if is_superuser(user):
        return queryset
    groups = _group_ids(user)
    member_of = KnowledgeBase.objects.none().values("pk")
    if groups:
        lookups = {
            Role.READER: Q(allowed_groups__in=groups) | Q(editor_groups__in=groups) | Q(publisher_groups__in=groups),
            Role.EDITOR: Q(editor_groups__in=groups) | Q(publisher_groups__in=groups),
            Role.PUBLISHER: Q(publisher_groups__in=groups),
        }
        member_of = KnowledgeBase.objects.filter(lookups[role]).values("pk")
    if role > Role.READER:
        return queryset.filter(pk__in=member_of)
    if not _signed_in(user):
        return queryset.filter(visibility=Visibility.PUBLIC)
    return queryset.filter(Q(visibility__in=[Visibility.PUBLIC, Visibility.INTERNAL]) | Q(pk__in=member_of))


def readable_knowledge_bases(user: User | None) -> QuerySet[KnowledgeBase]:
    return knowledge_bases_with_role(user, Role.READER)


def can_read_knowledge_base(user: User | None, kb: KnowledgeBase) -> bool:
    return role_in(user, kb) >= Role.READER


def can_create_knowledge_base(user: User | None) -> bool:
    return _signed_in(user) and user.has_perm("knowledge.add_knowledgebase")


def holds_role_anywhere(user: User | None, role: Role) -> bool:
    """Whether `user` holds `role` on at least one knowledge base. The admin asks it for every
    model of every page (menu, permissions), so it is kept on the user object per request."""
    if is_superuser(user):
        return True
    if not _signed_in(user):
        return False
    held = getattr(user, "_knowledge_roles_anywhere", None)
    if held is None:
        held = user._knowledge_roles_anywhere = {}
    if role not in held:
        held[role] = knowledge_bases_with_role(user, role).exists()
    return held[role]


def _knowledge_base_not_found(named: object) -> NotFound:
    return NotFound(_("知识库 %(kb)s 不存在或无权访问。") % {"kb": named}, code="knowledge_base_not_found")


def access_knowledge_base(*, user: User | None, kb_id: str, role: Role = Role.READER) -> KnowledgeBase:
    """The knowledge base with slug `kb_id`, or NotFound / Forbidden."""
    return _access(user=user, role=role, named=kb_id, slug=kb_id)


def access_knowledge_bases(*, user: User | None, kb_ids: Sequence[str]) -> tuple[KnowledgeBase, ...]:
    """The knowledge bases with slugs `kb_ids` that `user` may read, in the given order, in one
    query whatever their number; NotFound naming the first one that is missing or hidden (the
    same answer for both, as for one)."""
    slugs = list(dict.fromkeys(kb_ids))
    found = {
        kb.slug: kb
        for kb in readable_knowledge_bases(user).filter(slug__in=slugs)
        .select_related("active_version").prefetch_related(*ROLE_GROUPS)
    }
    for slug in slugs:
        kb = found.get(slug)
        if kb is None or role_in(user, kb) < Role.READER:
            raise _knowledge_base_not_found(slug)
    return tuple(found[slug] for slug in slugs)


def access_knowledge_base_by_pk(*, user: User | None, pk: int, role: Role = Role.READER) -> KnowledgeBase:
    """The same check for pages addressed by primary key (admin, event stream)."""
    return _access(user=user, role=role, named=pk, pk=pk)


def _access(*, user: User | None, role: Role, named: object, **lookup) -> KnowledgeBase:
    # Looked up through what the user may read, in one query: a knowledge base they may not
    # read is then missing by construction, with the same answer (naming only what the caller
    # named) and the same work as one that does not exist.
    kb = readable_knowledge_bases(user).filter(**lookup).select_related("active_version").first()
    if kb is None or role_in(user, kb) < Role.READER:
        raise _knowledge_base_not_found(named)
    require_role(user=user, kb=kb, role=role)
    return kb


def require_role(*, user: User | None, kb: KnowledgeBase, role: Role) -> None:
    """Forbidden when `user` holds less than `role` on `kb`, a knowledge base they may read
    (one that an `access_*` call returned): whether it exists is not this check's to say."""
    if role_in(user, kb) >= role:
        return
    if role == Role.PUBLISHER:
        raise Forbidden(_("只有该知识库的发布者可以进行此操作。"), code="publisher_required")
    raise Forbidden(_("只有该知识库的编辑者可以进行此操作。"), code="editor_required")


def readable_versions(*, user: User | None, kb: KnowledgeBase) -> QuerySet[KnowledgeBaseVersion]:
    """Editors see every version; readers only the one that answers questions."""
    versions = KnowledgeBaseVersion.objects.filter(knowledge_base=kb)
    if role_in(user, kb) >= Role.EDITOR:
        return versions
    return versions.filter(pk=kb.active_version_id) if kb.active_version_id else versions.none()


def access_version(
    *, user: User | None, kb_id: str, number: int, role: Role = Role.READER
) -> KnowledgeBaseVersion:
    kb = access_knowledge_base(user=user, kb_id=kb_id, role=role)
    version = readable_versions(user=user, kb=kb).filter(number=number).first()
    if version is None:
        raise NotFound(_("版本 v%(number)s 不存在。") % {"number": number}, code="version_not_found")
    return version


def readable_documents(*, user: User | None, kb: KnowledgeBase) -> QuerySet[Document]:
    """Editors see documents in preparation too; readers what answers draw on."""
    documents = Document.objects.filter(knowledge_base=kb)
    if role_in(user, kb) >= Role.EDITOR:
        return documents
    return published_documents(documents, kb)


def access_document(
    *, user: User | None, kb_id: str, document_id: int, role: Role = Role.READER
) -> Document:
    kb = access_knowledge_base(user=user, kb_id=kb_id, role=role)
    document = readable_documents(user=user, kb=kb).filter(pk=document_id).first()
    if document is None:
        raise NotFound(_("文档 %(id)s 不存在。") % {"id": document_id}, code="document_not_found")
    return document


def published_documents(queryset: QuerySet[Document], kb: KnowledgeBase) -> QuerySet[Document]:
    if kb.active_version_id is None:
        return queryset.none()
    return queryset.filter(versions=kb.active_version_id)


def openable_documents(user: User | None) -> QuerySet[Document]:
    """Documents `user` may open in any knowledge base: every one of those they edit, the
    published ones of those they read. One queryset, so a row they may not open costs the
    same lookup as a row that does not exist."""
    documents = Document.objects.all()
    if is_superuser(user):
        return documents
    published = KnowledgeBaseVersion.documents.through.objects.filter(
        document_id=OuterRef("pk"), knowledgebaseversion_id=OuterRef("knowledge_base__active_version_id"),
    )
    return documents.filter(
        Q(knowledge_base__in=knowledge_bases_with_role(user, Role.EDITOR))
        | (Q(knowledge_base__in=readable_knowledge_bases(user)) & Exists(published))
    )


def access_asset(*, user: User | None, asset_id: int) -> DocumentAsset:
    """An image asset, readable when its document is (published, or the user edits the KB)."""
    asset = (
        DocumentAsset.objects.filter(pk=asset_id, document__in=openable_documents(user))
        .select_related("document__knowledge_base").first()
    )
    if asset is None:
        raise NotFound(_("资源 %(id)s 不存在或无权访问。") % {"id": asset_id}, code="asset_not_found")
    return asset


def access_chunk(*, user: User | None, chunk_id: int) -> Chunk:
    """A chunk, readable when its document is (published, or the user edits the KB)."""
    chunk = (
        Chunk.objects.filter(pk=chunk_id, document__in=openable_documents(user))
        .select_related("document__knowledge_base").first()
    )
    if chunk is None:
        raise NotFound(_("分块 %(id)s 不存在或无权访问。") % {"id": chunk_id}, code="chunk_not_found")
    return chunk


def readable_faqs(*, user: User | None, kb: KnowledgeBase) -> QuerySet[FAQ]:
    faqs = FAQ.objects.filter(knowledge_base=kb)
    if role_in(user, kb) >= Role.EDITOR:
        return faqs
    return faqs.filter(enabled=True)  # a disabled FAQ is work in progress, like a draft


def access_faq(*, user: User | None, kb_id: str, faq_id: int, role: Role = Role.READER) -> FAQ:
    kb = access_knowledge_base(user=user, kb_id=kb_id, role=role)
    faq = readable_faqs(user=user, kb=kb).filter(pk=faq_id).first()
    if faq is None:
        raise NotFound(_("FAQ %(id)s 不存在。") % {"id": faq_id}, code="faq_not_found")
    return faq
