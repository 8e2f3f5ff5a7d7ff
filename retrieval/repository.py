"""Relational facts for retrieval: which documents may answer, chunk rows, neighbours, assets.

Every read is batched (no N+1): one query for READY facts, one for candidate chunks, one for
Small2Big neighbours, one for assets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from django.db import DatabaseError
from django.utils.translation import gettext as _
from django.db.models import Count, Q
from django.urls import reverse

from knowledge.models import (
    Chunk,
    Document,
    DocumentAsset,
    KnowledgeBase,
    KnowledgeBaseVersion,
)
from knowledge.items import selectors as item_selectors
from knowledge.previews import has_preview
from knowledge.catalog.selectors import ready_documents_of_active_version, ready_documents_of_active_versions, ready_documents_of_version

from .contracts import NO_ACTIVE_VERSION, NO_DOCUMENT_MATCHES_FILTERS, AssetRef, FactsUnavailable, MetadataFilter
from .filters import admitted


@dataclass(frozen=True)
class ReadyFacts:
    version: int | None
    ready_ids: frozenset[int]
    # Documents of the KB that may not answer. Only loaded when "not in" them is the shorter
    # filter; `other_count` is always known.
    other_ids: frozenset[int] | None
    visibility_scope: str
    empty_reason: str = ""
    other_count: int = 0
    # With metadata filters: the READY documents (∩ document_ids) before them; `ready_ids` is
    # what they admitted. None without filters.
    before_filters: int | None = None


@dataclass(frozen=True)
class ChunkRow:
    id: int
    document_id: int
    document_title: str
    ordinal: int
    parent_id: str
    heading_path: tuple[str, ...]
    locator: dict
    content_type: str
    content: str
    token_count: int
    asset_ids: tuple[int, ...]
    preview_url: str | None = None
    kb_id: int = 0


class Repository(Protocol):
    def ready_facts(
        self, *, kb_id: int, document_ids: Sequence[int] | None, version_id: int | None = None,
        filters: Sequence[MetadataFilter] = (),
    ) -> ReadyFacts: ...

    def ready_facts_many(
        self, *, kb_ids: Sequence[int], document_ids: Sequence[int] | None, filters: Sequence[MetadataFilter] = (),
    ) -> dict[int, ReadyFacts]:
        """The active versions' facts of several knowledge bases, in a fixed number of queries."""
        ...

    def load_chunks(self, ids: Iterable[int]) -> dict[int, ChunkRow]: ...

    def load_neighbours(self, positions: Iterable[tuple[int, int]]) -> dict[tuple[int, int], ChunkRow]: ...

    def load_assets(self, ids: Iterable[int]) -> dict[int, AssetRef]: ...

    def documents_about_other_items(self, *, document_ids: Iterable[int], item_ids: Sequence[int]) -> frozenset[int]: ...

    def chunks_about_other_items(self, *, chunk_ids: Iterable[int], item_ids: Sequence[int]) -> frozenset[int]: ...


_CHUNK_FIELDS = (
    "id", "document_id", "document__title", "ordinal", "parent_id", "heading_path", "locator",
    "content_type", "content", "token_count", "asset_ids", "bboxes", "document__file_type",
    "document__knowledge_base_id",
)


def _row(values: dict) -> ChunkRow:
    return ChunkRow(
        id=values["id"],
        document_id=values["document_id"],
        document_title=values["document__title"],
        ordinal=values["ordinal"],
        parent_id=values["parent_id"] or "",
        heading_path=tuple(values["heading_path"] or ()),
        locator=values["locator"] or {},
        content_type=values["content_type"],
        content=values["content"],
        token_count=values["token_count"],
        asset_ids=tuple(values["asset_ids"] or ()),
        kb_id=values["document__knowledge_base_id"],
        preview_url=(
            reverse("chunk-preview", args=[values["id"]])
            if has_preview(file_type=values["document__file_type"], bboxes=values["bboxes"])
            else None
        ),
    )


class DjangoRepository:
    """The repository over the project's own tables."""

    def ready_facts(
        self, *, kb_id: int, document_ids: Sequence[int] | None, version_id: int | None = None,
        filters: Sequence[MetadataFilter] = (),
    ) -> ReadyFacts:
        before: int | None = None
        try:
            kb = KnowledgeBase.objects.select_related("active_version").get(pk=kb_id)
            scope = _visibility_scope(
                kb, sorted(kb.allowed_groups.values_list("pk", flat=True)) if kb.visibility == "restricted" else ()
            )
            if version_id is not None:
                version = KnowledgeBaseVersion.objects.filter(pk=version_id, knowledge_base_id=kb_id).first()
                if version is None:
                    return ReadyFacts(None, frozenset(), None, scope, "no_such_version")
                number = version.number
                ready_documents = ready_documents_of_version(version=version, document_ids=document_ids)
            elif kb.active_version_id is None:
                return ReadyFacts(None, frozenset(), None, scope, NO_ACTIVE_VERSION)
            else:
                number = kb.active_version.number
                ready_documents = ready_documents_of_active_version(kb_id=kb_id, document_ids=document_ids)
            if filters:
                before = ready_documents.count()
                ready_documents = admitted(ready_documents, filters)
            ready = frozenset(ready_documents.values_list("pk", flat=True))
            others: frozenset[int] | None = None
            other_count = 0
            if ready:
                other_count = Document.objects.filter(knowledge_base_id=kb_id).count() - len(ready)
                if 0 < other_count < len(ready):
                    others = frozenset(
                        Document.objects.filter(knowledge_base_id=kb_id)
                        .exclude(pk__in=ready_documents.values("pk"))
                        .values_list("pk", flat=True)
                    )
        except DatabaseError as exc:
            raise FactsUnavailable(_("知识库事实数据暂时无法读取，请稍后重试。")) from exc
        return ReadyFacts(number, ready, others, scope, _empty_reason(ready, document_ids, before), other_count, before)

    def ready_facts_many(
        self, *, kb_ids: Sequence[int], document_ids: Sequence[int] | None, filters: Sequence[MetadataFilter] = (),
    ) -> dict[int, ReadyFacts]:
        ids = list(dict.fromkeys(kb_ids))
        try:
            kbs = {
                kb.pk: kb for kb in KnowledgeBase.objects.select_related("active_version")
                .prefetch_related("allowed_groups").filter(pk__in=ids)
            }
            ready_by_kb: dict[int, set[int]] = {kb_id: set() for kb_id in ids}
            ready_rows = ready_documents_of_active_versions(kb_ids=ids, document_ids=document_ids)
            before: dict[int, int] = {}
            if filters:
                # The filters apply in each knowledge base: one query for all of them.
                before = dict(ready_rows.order_by().values("knowledge_base_id").annotate(n=Count("pk"))
                              .values_list("knowledge_base_id", "n"))
                ready_rows = admitted(ready_rows, filters)
            for pk, kb_id in ready_rows.values_list("pk", "knowledge_base_id"):
                ready_by_kb[kb_id].add(pk)
            totals = dict(
                Document.objects.filter(knowledge_base_id__in=ids).values("knowledge_base_id")
                .annotate(n=Count("pk")).values_list("knowledge_base_id", "n")
            )
            # "not in the others" is pushed down where that list is the shorter one.
            shorter = [k for k in ids if 0 < totals.get(k, 0) - len(ready_by_kb[k]) < len(ready_by_kb[k])]
            others_by_kb: dict[int, set[int]] = {kb_id: set() for kb_id in shorter}
            if shorter:
                everything_ready = set().union(*(ready_by_kb[k] for k in shorter))
                rows = Document.objects.filter(knowledge_base_id__in=shorter).exclude(pk__in=everything_ready)
                for pk, kb_id in rows.values_list("pk", "knowledge_base_id"):
                    others_by_kb[kb_id].add(pk)
        except DatabaseError as exc:
            raise FactsUnavailable(_("知识库事实数据暂时无法读取，请稍后重试。")) from exc
        facts: dict[int, ReadyFacts] = {}
        for kb_id in ids:
            kb = kbs.get(kb_id)
            if kb is None:
                facts[kb_id] = ReadyFacts(None, frozenset(), None, "", "no_such_knowledge_base")
                continue
            scope = _visibility_scope(kb, sorted(g.pk for g in kb.allowed_groups.all()))
            if kb.active_version_id is None:
                facts[kb_id] = ReadyFacts(None, frozenset(), None, scope, NO_ACTIVE_VERSION)
                continue
            ready = frozenset(ready_by_kb[kb_id])
            others = others_by_kb.get(kb_id)
            before_filters = before.get(kb_id, 0) if filters else None
            facts[kb_id] = ReadyFacts(
                kb.active_version.number, ready, frozenset(others) if others is not None else None, scope,
                _empty_reason(ready, document_ids, before_filters), totals.get(kb_id, 0) - len(ready) if ready else 0,
                before_filters,
            )
        return facts

    def load_chunks(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        ids = list(ids)
        if not ids:
            return {}
        try:
            return {v["id"]: _row(v) for v in Chunk.objects.filter(pk__in=ids).values(*_CHUNK_FIELDS)}
        except DatabaseError as exc:
            raise FactsUnavailable(_("知识库事实数据暂时无法读取，请稍后重试。")) from exc

    def load_neighbours(self, positions: Iterable[tuple[int, int]]) -> dict[tuple[int, int], ChunkRow]:
        positions = list(set(positions))
        if not positions:
            return {}
        condition = Q()
        by_document: dict[int, list[int]] = {}
        for document_id, ordinal in positions:
            by_document.setdefault(document_id, []).append(ordinal)
        for document_id, ordinals in by_document.items():
            condition |= Q(document_id=document_id, ordinal__in=ordinals)
        try:
            rows = list(Chunk.objects.filter(condition).values(*_CHUNK_FIELDS))
        except DatabaseError as exc:
            raise FactsUnavailable(_("知识库事实数据暂时无法读取，请稍后重试。")) from exc
        return {(v["document_id"], v["ordinal"]): _row(v) for v in rows}

    def load_assets(self, ids: Iterable[int]) -> dict[int, AssetRef]:
        ids = list(set(ids))
        if not ids:
            return {}
        assets = DocumentAsset.objects.filter(pk__in=ids).values(
            "id", "document_id", "page", "bbox", "width", "height", "caption"
        )
        return {
            a["id"]: AssetRef(
                id=a["id"], document_id=a["document_id"], page=a["page"],
                bbox=tuple(a["bbox"] or ()), width=a["width"], height=a["height"],
                caption=a["caption"], url=reverse("asset-bytes", args=[a["id"]]),
            )
            for a in assets
        }


    def documents_about_other_items(self, *, document_ids: Iterable[int], item_ids: Sequence[int]) -> frozenset[int]:
        try:
            return frozenset(item_selectors.documents_about_other_items(document_ids=document_ids, item_ids=item_ids))
        except DatabaseError as exc:
            raise FactsUnavailable(_("知识库事实数据暂时无法读取，请稍后重试。")) from exc

    def chunks_about_other_items(self, *, chunk_ids: Iterable[int], item_ids: Sequence[int]) -> frozenset[int]:
        try:
            return frozenset(item_selectors.chunks_about_other_items(chunk_ids=chunk_ids, item_ids=item_ids))
        except DatabaseError as exc:
            raise FactsUnavailable(_("知识库事实数据暂时无法读取，请稍后重试。")) from exc


def _visibility_scope(kb: KnowledgeBase, groups: Sequence[int]) -> str:
    """Who may read the knowledge base, as part of its cache keys: a change of audience must
    not serve what was cached for the previous one."""
    if kb.visibility == "restricted":
        return f"restricted:{','.join(map(str, groups))}"
    return kb.visibility


def _empty_reason(ready: frozenset[int], document_ids: Sequence[int] | None, before_filters: int | None = None) -> str:
    if ready:
        return ""
    if before_filters:  # documents could answer; the filters admitted none of them
        return NO_DOCUMENT_MATCHES_FILTERS
    return "document_ids_not_ready" if document_ids is not None else "no_ready_documents"
