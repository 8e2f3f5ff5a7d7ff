"""Reads of the item catalog."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache

from django.db.models import Count, Max

from knowledge.items.matching import CatalogItem, ItemCatalog
from knowledge.models import Chunk, ChunkItem, Item, TagSource


def catalog_for(*, kb_ids: Sequence[int]) -> ItemCatalog:
    """The enabled items of these knowledge bases. Every question reads it: the compiled
    catalog is kept per process and rebuilt when an item of these bases was saved or deleted
    (one aggregate query tells)."""
    ids = tuple(sorted(set(kb_ids)))
    state = Item.objects.filter(knowledge_base_id__in=ids).aggregate(count=Count("pk"), last=Max("updated_at"))
    return _catalog(ids, state["count"], state["last"])


@lru_cache(maxsize=64)
def _catalog(kb_ids: tuple[int, ...], count: int, last: datetime | None) -> ItemCatalog:
    if not count:
        return ItemCatalog(())
    rows = Item.objects.filter(knowledge_base_id__in=kb_ids, enabled=True).order_by("pk")
    return ItemCatalog(
        CatalogItem(
            id=row.pk, name=row.name, aliases=tuple(row.aliases or ()), codes=tuple(row.codes or ()),
            group=row.group, group_aliases=tuple(row.group_aliases or ()), description=row.description,
        )
        for row in rows
    )


def documents_about_other_items(*, document_ids: Iterable[int], item_ids: Sequence[int]) -> set[int]:
    """Of `document_ids`, those whose every tagged chunk is about other items than `item_ids`
    and which have no untagged chunk: a manual of another product. A document with text about
    no item, or any chunk about `item_ids`, is not among them."""
    ids = list(document_ids)
    if not ids or not item_ids:
        return set()
    tags = ChunkItem.objects.filter(document_id__in=ids).exclude(source=TagSource.EXCLUDED)
    tagged = set(tags.values_list("document_id", flat=True).distinct())
    if not tagged:
        return set()
    wanted = set(tags.filter(item_id__in=list(item_ids)).values_list("document_id", flat=True).distinct())
    candidates = tagged - wanted
    if not candidates:
        return set()
    # A chunk of it that names no item keeps the document: its general text may answer.
    untagged = set(
        Chunk.objects.filter(document_id__in=list(candidates))
        .exclude(pk__in=tags.values("chunk_id"))
        .values_list("document_id", flat=True)
        .distinct()
    )
    return candidates - untagged


def chunks_about_other_items(*, chunk_ids: Iterable[int], item_ids: Sequence[int]) -> set[int]:
    """Of `chunk_ids`, those tagged with some item but with none of `item_ids`: text about
    another product, which a question confirmed to be about `item_ids` must not read. Chunks
    with no tag (general text) are not among them."""
    ids = list(chunk_ids)
    if not ids or not item_ids:
        return set()
    tagged = ChunkItem.objects.filter(chunk_id__in=ids).exclude(source=TagSource.EXCLUDED)
    about_any = set(tagged.values_list("chunk_id", flat=True))
    about_wanted = set(tagged.filter(item_id__in=list(item_ids)).values_list("chunk_id", flat=True))
    return about_any - about_wanted


def chunk_item_names(*, chunk_ids: Iterable[int]) -> dict[int, list[str]]:
    """Each chunk's items by name (excluded tags left out)."""
    names: dict[int, list[str]] = {}
    rows = (ChunkItem.objects.filter(chunk_id__in=list(chunk_ids)).exclude(source=TagSource.EXCLUDED)
            .select_related("item").order_by("item__name"))
    for row in rows:
        names.setdefault(row.chunk_id, []).append(row.item.name)
    return names


def document_items(*, document_id: int) -> list[tuple[str, int]]:
    """The items a document's chunks are about, with how many chunks each, most first."""
    rows = (ChunkItem.objects.filter(document_id=document_id).exclude(source=TagSource.EXCLUDED)
            .values("item__name").annotate(chunks=Count("chunk_id")).order_by("-chunks", "item__name"))
    return [(row["item__name"], row["chunks"]) for row in rows]
