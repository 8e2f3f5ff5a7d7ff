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
from django.db.models import Q
from django.urls import reverse

from knowledge.models import Chunk, Document, DocumentAsset, KnowledgeBase, KnowledgeBaseVersion
from knowledge.previews import has_preview
from knowledge.selectors import ready_documents_of_active_version, ready_documents_of_version

from .contracts import AssetRef, FactsUnavailable


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


class Repository(Protocol):
    def ready_facts(
        self, *, kb_id: int, document_ids: Sequence[int] | None, version_id: int | None = None
    ) -> ReadyFacts: ...

    def load_chunks(self, ids: Iterable[int]) -> dict[int, ChunkRow]: ...

    def load_neighbours(self, positions: Iterable[tuple[int, int]]) -> dict[tuple[int, int], ChunkRow]: ...

    def load_assets(self, ids: Iterable[int]) -> dict[int, AssetRef]: ...


_CHUNK_FIELDS = (
    "id", "document_id", "document__title", "ordinal", "parent_id", "heading_path", "locator",
    "content_type", "content", "token_count", "asset_ids", "bboxes", "document__file_type",
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
        preview_url=(
            reverse("chunk-preview", args=[values["id"]])
            if has_preview(file_type=values["document__file_type"], bboxes=values["bboxes"])
            else None
        ),
    )


class DjangoRepository:
    """The repository over the project's own tables."""

    def ready_facts(
        self, *, kb_id: int, document_ids: Sequence[int] | None, version_id: int | None = None
    ) -> ReadyFacts:
        try:
            kb = KnowledgeBase.objects.select_related("active_version").get(pk=kb_id)
            scope = kb.visibility
            if kb.visibility == "restricted":
                groups = sorted(kb.allowed_groups.values_list("pk", flat=True))
                scope = f"restricted:{','.join(map(str, groups))}"
            if version_id is not None:
                version = KnowledgeBaseVersion.objects.filter(pk=version_id, knowledge_base_id=kb_id).first()
                if version is None:
                    return ReadyFacts(None, frozenset(), None, scope, "no_such_version")
                number = version.number
                ready_documents = ready_documents_of_version(version=version, document_ids=document_ids)
            elif kb.active_version_id is None:
                return ReadyFacts(None, frozenset(), None, scope, "no_active_version")
            else:
                number = kb.active_version.number
                ready_documents = ready_documents_of_active_version(kb_id=kb_id, document_ids=document_ids)
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
        reason = ""
        if not ready:
            reason = "document_ids_not_ready" if document_ids is not None else "no_ready_documents"
        return ReadyFacts(number, ready, others, scope, reason, other_count)

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
