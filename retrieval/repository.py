"""Relational facts for retrieval: which documents may answer, chunk rows, neighbours, assets.

Every read is batched (no N+1): a fixed number of queries for READY facts (counts, and the shorter
side listed), one to confirm candidates against an unlisted side, one for candidate chunks, one
for Small2Big neighbours, one for assets.
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
    """Which documents of a knowledge base may answer, as counts and the shorter list.

    Listing every READY document costs a row per document on each question, and a knowledge
    base of ten thousand documents then spends more on its ids than on the search. So both sides
    are counted and only the shorter one is listed: `ready_ids` when they are fewer (or the
    caller asked for them, or there are at most `LISTED_READY`), `other_ids` when the documents
    that may not answer are; neither when every one of many documents may answer. Without
    `ready_ids` the candidates of the search are confirmed (`Repository.confirm_ready`), so an
    unlisted side is never trusted.
    """

    version: int | None
    ready_count: int
    ready_ids: frozenset[int] | None
    other_ids: frozenset[int] | None
    visibility_scope: str
    empty_reason: str = ""
    other_count: int = 0
    # With metadata filters: the READY documents (∩ document_ids) before them; `ready_count` is
    # what they admitted. None without filters.
    before_filters: int | None = None


def _nothing(scope: str, reason: str) -> ReadyFacts:
    return ReadyFacts(None, 0, frozenset(), None, scope, reason)


# Up to this many READY documents are listed whatever the other side: listing them costs less
# than confirming the candidates afterwards (measured on 2 cores, SQLite: about 0.8 µs an id
# against 0.7–1 ms for the confirming query, so they break even near a thousand).
LISTED_READY = 1000


def _listed(*, ready: int, others: int, with_ids: bool) -> tuple[bool, bool]:
    """Which sides to list: READY when asked, when few, or when they are the shorter side; the
    others when they are fewer than the READY ones (and some exist)."""
    list_others = 0 < others < ready
    return with_ids or ready <= LISTED_READY or (0 < others and not list_others), list_others


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
        filters: Sequence[MetadataFilter] = (), with_ids: bool = False,
    ) -> ReadyFacts: ...

    def ready_facts_many(
        self, *, kb_ids: Sequence[int], document_ids: Sequence[int] | None, filters: Sequence[MetadataFilter] = (),
        with_ids: bool = False,
    ) -> dict[int, ReadyFacts]:
        """The active versions' facts of several knowledge bases, in a fixed number of queries."""
        ...

    def confirm_ready(
        self, *, kb_ids: Sequence[int], document_ids: Iterable[int], version_id: int | None = None,
        filters: Sequence[MetadataFilter] = (),
    ) -> frozenset[int]:
        """Those of `document_ids` that may answer now (READY in the version, admitted by the
        filters), in one query: the check of candidates whose facts were only counted."""
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
        filters: Sequence[MetadataFilter] = (), with_ids: bool = False,
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
                    return _nothing(scope, "no_such_version")
                number = version.number
                ready_documents = ready_documents_of_version(version=version, document_ids=document_ids)
            elif kb.active_version_id is None:
                return _nothing(scope, NO_ACTIVE_VERSION)
            else:
                number = kb.active_version.number
                ready_documents = ready_documents_of_active_version(kb_id=kb_id, document_ids=document_ids)
            if filters:
                before = ready_documents.count()
                ready_documents = admitted(ready_documents, filters)
            # Sets of ids: the model's ordering would sort every READY row (most of this read).
            ready_documents = ready_documents.order_by()
            # A few READY documents are listed and counted by one read; more are counted first.
            head = list(ready_documents.values_list("pk", flat=True)[: LISTED_READY + 1])
            ready_count = len(head) if len(head) <= LISTED_READY else ready_documents.count()
            if not ready_count:
                return ReadyFacts(number, 0, frozenset(), None, scope,
                                  _empty_reason(0, document_ids, before), 0, before)
            other_count = max(0, Document.objects.filter(knowledge_base_id=kb_id).count() - ready_count)
            list_ready, list_others = _listed(ready=ready_count, others=other_count, with_ids=with_ids)
            ready = None
            if list_ready:
                ready = frozenset(head) if len(head) <= LISTED_READY else frozenset(
                    ready_documents.values_list("pk", flat=True))
            others = (
                frozenset(Document.objects.filter(knowledge_base_id=kb_id).order_by()
                          .exclude(pk__in=ready_documents.values("pk")).values_list("pk", flat=True))
                if list_others else None
            )
        except DatabaseError as exc:
            raise FactsUnavailable(_("知识库事实数据暂时无法读取，请稍后重试。")) from exc
        if ready is not None:
            ready_count = len(ready)
        return ReadyFacts(number, ready_count, ready, others, scope,
                          _empty_reason(ready_count, document_ids, before), other_count, before)

    def ready_facts_many(
        self, *, kb_ids: Sequence[int], document_ids: Sequence[int] | None, filters: Sequence[MetadataFilter] = (),
        with_ids: bool = False,
    ) -> dict[int, ReadyFacts]:
        ids = list(dict.fromkeys(kb_ids))
        try:
            kbs = {
                kb.pk: kb for kb in KnowledgeBase.objects.select_related("active_version")
                .prefetch_related("allowed_groups").filter(pk__in=ids)
            }
            ready_rows = ready_documents_of_active_versions(kb_ids=ids, document_ids=document_ids).order_by()
            before: dict[int, int] = {}
            if filters:
                # The filters apply in each knowledge base: one query for all of them.
                before = _counts_by_kb(ready_rows)
                ready_rows = admitted(ready_rows, filters)
            ready_counts = _counts_by_kb(ready_rows)
            totals = _counts_by_kb(Document.objects.filter(knowledge_base_id__in=[k for k in ids if ready_counts.get(k)]))
            sides = {
                k: _listed(ready=ready_counts[k], others=max(0, totals.get(k, 0) - ready_counts[k]), with_ids=with_ids)
                for k in ids if ready_counts.get(k)
            }
            ready_by_kb: dict[int, set[int]] = {k: set() for k, (list_ready, _o) in sides.items() if list_ready}
            if ready_by_kb:
                for pk, kb_id in ready_rows.filter(knowledge_base_id__in=list(ready_by_kb)).values_list("pk", "knowledge_base_id"):
                    ready_by_kb[kb_id].add(pk)
            # "not in the others" is pushed down where that list is the shorter one.
            others_by_kb: dict[int, set[int]] = {k: set() for k, (_r, list_others) in sides.items() if list_others}
            if others_by_kb:
                shorter = list(others_by_kb)
                rows = Document.objects.filter(knowledge_base_id__in=shorter).order_by().exclude(
                    pk__in=ready_rows.filter(knowledge_base_id__in=shorter).values("pk"))
                for pk, kb_id in rows.values_list("pk", "knowledge_base_id"):
                    others_by_kb[kb_id].add(pk)
        except DatabaseError as exc:
            raise FactsUnavailable(_("知识库事实数据暂时无法读取，请稍后重试。")) from exc
        facts: dict[int, ReadyFacts] = {}
        for kb_id in ids:
            kb = kbs.get(kb_id)
            if kb is None:
                facts[kb_id] = _nothing("", "no_such_knowledge_base")
                continue
            scope = _visibility_scope(kb, sorted(g.pk for g in kb.allowed_groups.all()))
            if kb.active_version_id is None:
                facts[kb_id] = _nothing(scope, NO_ACTIVE_VERSION)
                continue
            ready = frozenset(ready_by_kb[kb_id]) if kb_id in ready_by_kb else None
            count = len(ready) if ready is not None else ready_counts.get(kb_id, 0)
            if not count:
                ready = frozenset()
            others = others_by_kb.get(kb_id)
            before_filters = before.get(kb_id, 0) if filters else None
            facts[kb_id] = ReadyFacts(
                kb.active_version.number, count, ready, frozenset(others) if others is not None else None, scope,
                _empty_reason(count, document_ids, before_filters),
                max(0, totals.get(kb_id, 0) - count) if count else 0, before_filters,
            )
        return facts

    def confirm_ready(
        self, *, kb_ids: Sequence[int], document_ids: Iterable[int], version_id: int | None = None,
        filters: Sequence[MetadataFilter] = (),
    ) -> frozenset[int]:
        ids = list(set(document_ids))
        if not ids or not kb_ids:
            return frozenset()
        try:
            if version_id is not None:
                version = KnowledgeBaseVersion.objects.filter(pk=version_id, knowledge_base_id__in=list(kb_ids)).first()
                if version is None:
                    return frozenset()
                rows = ready_documents_of_version(version=version, document_ids=ids)
            else:
                rows = ready_documents_of_active_versions(kb_ids=kb_ids, document_ids=ids)
            if filters:
                rows = admitted(rows, filters)
            return frozenset(rows.order_by().values_list("pk", flat=True))
        except DatabaseError as exc:
            raise FactsUnavailable(_("知识库事实数据暂时无法读取，请稍后重试。")) from exc

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


def _counts_by_kb(documents) -> dict[int, int]:
    return dict(documents.order_by().values("knowledge_base_id").annotate(n=Count("pk"))
                .values_list("knowledge_base_id", "n"))


def _empty_reason(ready_count: int, document_ids: Sequence[int] | None, before_filters: int | None = None) -> str:
    if ready_count:
        return ""
    if before_filters:  # documents could answer; the filters admitted none of them
        return NO_DOCUMENT_MATCHES_FILTERS
    return "document_ids_not_ready" if document_ids is not None else "no_ready_documents"
