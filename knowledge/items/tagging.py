"""Which chunks are about which item, detected from the chunk's own words, then its headings,
then its document's title.

A chunk names items when its text does ("星河X3 Pro 3年 1年" is about X3 Pro, and not about X3:
the longest name wins, see `matching`). A chunk naming none inherits the items its headings name
(a section "星河X3 Pro 规格" is about X3 Pro throughout), else the single item its document's
title names. Staff's own rows (manual and excluded) are never rewritten.
"""

from __future__ import annotations

from collections.abc import Iterable

from knowledge.items.matching import ItemCatalog
from knowledge.items.selectors import catalog_for
from knowledge.models import Chunk, ChunkItem, TagSource

BATCH = 2000


def detect_items(*, catalog: ItemCatalog, content: str, heading_path: Iterable[str], title: str) -> set[int]:
    named = catalog.items_in(content)
    if named:
        return named
    headings = [h for h in heading_path if h and h != title]
    named = catalog.items_in("\n".join(headings))
    if named:
        return named
    from_title = catalog.items_in(title)
    return from_title if len(from_title) == 1 else set()


def tag_chunks(*, kb_id: int, chunks: Iterable[Chunk], catalog: ItemCatalog | None = None) -> int:
    """Rewrite the detected tags of `chunks` (with their documents loaded or loadable); the
    number of tags written."""
    catalog = catalog if catalog is not None else catalog_for(kb_ids=[kb_id])
    chunks = list(chunks)
    if not chunks:
        return 0
    ids = [chunk.pk for chunk in chunks]
    ChunkItem.objects.filter(chunk_id__in=ids, source=TagSource.DETECTED).delete()
    if not catalog:
        return 0
    kept = set(ChunkItem.objects.filter(chunk_id__in=ids).values_list("chunk_id", "item_id"))
    rows = []
    for chunk in chunks:
        title = chunk.document.title
        for item_id in sorted(detect_items(catalog=catalog, content=chunk.content,
                                           heading_path=chunk.heading_path or (), title=title)):
            if (chunk.pk, item_id) not in kept:
                rows.append(ChunkItem(chunk_id=chunk.pk, item_id=item_id, document_id=chunk.document_id,
                                      source=TagSource.DETECTED))
    ChunkItem.objects.bulk_create(rows, batch_size=500)
    return len(rows)


def retag_knowledge_base(*, kb_id: int) -> int:
    """Detect every chunk's items again, after the catalog changed."""
    catalog = catalog_for(kb_ids=[kb_id])
    written = 0
    chunks = Chunk.objects.filter(knowledge_base_id=kb_id).select_related("document").order_by("pk")
    last = 0
    while True:
        batch = list(chunks.filter(pk__gt=last)[:BATCH])
        if not batch:
            return written
        written += tag_chunks(kb_id=kb_id, chunks=batch, catalog=catalog)
        last = batch[-1].pk
