"""Writes to the item catalog. Every write detects the knowledge base's chunk tags again after
commit (in the background: a large base has many chunks) and moves its cache version, since a
question confirmed to be about an item reads only that item's chunks."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.utils.translation import gettext as _

from ragsite.errors import Conflict, ValidationFailed

from knowledge import audit, epochs
from knowledge.actors import Actor
from knowledge.intake import IntakeLimits, check_file, read_first_sheet
from knowledge.items.tasks import schedule_retag
from knowledge.models import AuditAction, Chunk, ChunkItem, Item, KnowledgeBase, TagSource

MAX_NAMES = 50
MAX_NAME_CHARS = 200
MAX_IMPORT_ROWS = 5000
# Column titles an import accepts, in Chinese or English.
COLUMNS = {
    "name": ("名称", "name", "商品", "型号"),
    "aliases": ("别名", "aliases"),
    "codes": ("型号代码", "代码", "codes", "code"),
    "group": ("系列", "group", "类别"),
    "group_aliases": ("系列别名", "group_aliases"),
    "description": ("说明", "description"),
}


def _names(values: Sequence[str] | str, *, what: str) -> list[str]:
    if isinstance(values, str):
        values = [part for line in values.splitlines() for part in line.replace("；", ";").replace("，", ",")
                  .replace(";", ",").split(",")]
    cleaned = list(dict.fromkeys(v.strip() for v in values if v and v.strip()))
    if len(cleaned) > MAX_NAMES:
        raise ValidationFailed(_("%(what)s最多 %(n)s 个。") % {"what": what, "n": MAX_NAMES}, code="invalid_item")
    if any(len(v) > MAX_NAME_CHARS for v in cleaned):
        raise ValidationFailed(_("%(what)s每个最多 %(n)s 个字符。") % {"what": what, "n": MAX_NAME_CHARS},
                               code="invalid_item")
    return cleaned


@transaction.atomic
def save_item(
    *,
    kb: KnowledgeBase,
    name: str,
    actor: Actor,
    item: Item | None = None,
    aliases: Sequence[str] | str = (),
    codes: Sequence[str] | str = (),
    group: str = "",
    group_aliases: Sequence[str] | str = (),
    description: str = "",
    enabled: bool = True,
) -> Item:
    name = name.strip()
    if not name:
        raise ValidationFailed(_("名称不能为空。"), code="invalid_item")
    duplicate = Item.objects.filter(knowledge_base=kb, name=name)
    if item is not None:
        duplicate = duplicate.exclude(pk=item.pk)
    if duplicate.exists():
        raise Conflict(_("已存在同名的商品/型号。"), code="item_duplicate")
    item = _filled(item or Item(knowledge_base=kb), name=name, aliases=aliases, codes=codes, group=group,
                   group_aliases=group_aliases, description=description)
    item.enabled = enabled
    item.save()
    audit.record(kb=kb, actor=actor, action=AuditAction.ITEM_SAVED, target=name)
    _catalog_changed(kb_id=kb.pk)
    return item


@transaction.atomic
def delete_item(*, item: Item, actor: Actor) -> None:
    kb = item.knowledge_base
    audit.record(kb=kb, actor=actor, action=AuditAction.ITEM_DELETED, target=item.name)
    item.delete()
    _catalog_changed(kb_id=kb.pk)


@dataclass(frozen=True)
class ImportReport:
    created: int
    updated: int
    errors: tuple[str, ...]


def import_items(*, kb: KnowledgeBase, file_name: str, data: bytes, actor: Actor) -> ImportReport:
    """Items from a CSV or XLSX table with a header row (名称, 别名, 型号代码, 系列, 系列别名,
    说明; several names in one cell separated by commas or semicolons). An item of the same name is
    updated; a bad row is reported by its number and the rest are imported.

    The file is checked and read before the transaction opens: a write lock held while a
    workbook is parsed stops every other writer (on SQLite the whole database) for as long."""
    check_file(name=file_name, data=data, limits=IntakeLimits.for_imports())
    rows = _read_table(file_name, data)
    return _import_rows(kb=kb, file_name=file_name, rows=rows, actor=actor)


@transaction.atomic
def _import_rows(*, kb: KnowledgeBase, file_name: str, rows: list[list[object]], actor: Actor) -> ImportReport:
    if not rows:
        raise ValidationFailed(_("表格为空。"), code="import_empty")
    header = [str(cell or "").strip().lower() for cell in rows[0]]
    columns = {}
    for key, titles in COLUMNS.items():
        for index, title in enumerate(header):
            if title in titles:
                columns[key] = index
                break
    if "name" not in columns:
        raise ValidationFailed(_("表头缺少“名称”列。"), code="import_no_name_column")
    if len(rows) - 1 > MAX_IMPORT_ROWS:
        raise ValidationFailed(_("最多导入 %(n)s 行。") % {"n": MAX_IMPORT_ROWS}, code="import_too_many_rows")
    existing = {item.name: item for item in Item.objects.filter(knowledge_base=kb)}
    created = updated = 0
    errors = []
    for number, row in enumerate(rows[1:], start=2):
        def cell(key: str) -> str:
            index = columns.get(key)
            return str(row[index] or "").strip() if index is not None and index < len(row) else ""

        name = cell("name")
        if not name:
            continue
        try:
            with transaction.atomic():
                item = existing.get(name)
                saved = _filled(item or Item(knowledge_base=kb), name=name, aliases=cell("aliases"),
                                codes=cell("codes"), group=cell("group"), group_aliases=cell("group_aliases"),
                                description=cell("description"))
                saved.save()
        except ValidationFailed as exc:
            errors.append(_("第 %(n)s 行：%(error)s") % {"n": number, "error": exc.message})
            continue
        existing[name] = saved
        if item is None:
            created += 1
        else:
            updated += 1
    if created or updated:
        audit.record(kb=kb, actor=actor, action=AuditAction.ITEMS_IMPORTED,
                     target=_("%(file)s：新增 %(created)s，更新 %(updated)s") % {
                         "file": file_name, "created": created, "updated": updated})
        _catalog_changed(kb_id=kb.pk)
    return ImportReport(created=created, updated=updated, errors=tuple(errors))


def check_names(*, name: str, aliases: Sequence[str] | str = (), codes: Sequence[str] | str = (),
                group_aliases: Sequence[str] | str = ()) -> None:
    """ValidationFailed for names a save would refuse, before anything is written (forms)."""
    _filled(Item(), name=name.strip(), aliases=aliases, codes=codes, group="", group_aliases=group_aliases,
            description="")


def _filled(item: Item, *, name: str, aliases: Sequence[str] | str, codes: Sequence[str] | str, group: str,
            group_aliases: Sequence[str] | str, description: str) -> Item:
    """`item` with these names, checked and cleaned (unsaved)."""
    if len(name) > MAX_NAME_CHARS:
        raise ValidationFailed(_("名称最多 %(n)s 个字符。") % {"n": MAX_NAME_CHARS}, code="invalid_item")
    item.name = name
    item.aliases = [a for a in _names(aliases, what=_("别名")) if a != name]
    item.codes = _names(codes, what=_("型号代码"))
    item.group = group.strip()[:MAX_NAME_CHARS]
    item.group_aliases = _names(group_aliases, what=_("系列别名"))
    item.description = description.strip()
    return item


def _read_table(file_name: str, data: bytes) -> list[list[object]]:
    suffix = file_name.lower().rsplit(".", 1)[-1] if "." in file_name else ""
    if suffix == "csv":
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ValidationFailed(_("CSV 文件须为 UTF-8 编码。"), code="import_bad_encoding") from exc
        try:
            return [list(row) for row in csv.reader(io.StringIO(text))]
        except csv.Error as exc:  # a field over the csv module's limit, a stray quote at the end
            raise ValidationFailed(_("无法读取该 CSV 文件：%(error)s") % {"error": exc}, code="import_unreadable") from exc
    if suffix == "xlsx":
        return [list(row) for row in read_first_sheet(data, name=file_name, max_rows=MAX_IMPORT_ROWS + 2,
                                                          code="import_unreadable")]
    raise ValidationFailed(_("只支持 CSV 或 XLSX 文件。"), code="import_bad_type")


@transaction.atomic
def set_chunk_items(*, chunk: Chunk, item_ids: Sequence[int], actor: Actor) -> None:
    """Staff's word on what a chunk is about: these items (manual) and no other it names
    (excluded), whatever detection finds later."""
    kb = chunk.knowledge_base
    wanted = set(Item.objects.filter(knowledge_base=kb, pk__in=list(item_ids)).values_list("pk", flat=True))
    ChunkItem.objects.filter(chunk=chunk).delete()
    others = set(Item.objects.filter(knowledge_base=kb).exclude(pk__in=wanted).values_list("pk", flat=True))
    rows = [ChunkItem(chunk=chunk, item_id=i, document_id=chunk.document_id, source=TagSource.MANUAL) for i in wanted]
    rows += [ChunkItem(chunk=chunk, item_id=i, document_id=chunk.document_id, source=TagSource.EXCLUDED)
             for i in others]
    ChunkItem.objects.bulk_create(rows, batch_size=500)
    audit.record(kb=kb, actor=actor, action=AuditAction.ITEM_TAGS_EDITED,
                 target=str(chunk))
    epochs.bump_epoch(kb_id=kb.pk)


@transaction.atomic
def tag_chunk(*, chunk: Chunk, item: Item, source: TagSource, actor: Actor) -> ChunkItem:
    """Staff's tag on one chunk: about the item (manual) or not about it (excluded)."""
    if item.knowledge_base_id != chunk.knowledge_base_id:
        raise ValidationFailed(_("分块与商品/型号不属于同一个知识库。"), code="invalid_item_tag")
    if source not in (TagSource.MANUAL, TagSource.EXCLUDED):
        raise ValidationFailed(_("只能人工标注或人工排除。"), code="invalid_item_tag")
    tag, _created = ChunkItem.objects.update_or_create(
        chunk=chunk, item=item, defaults={"document_id": chunk.document_id, "source": source},
    )
    audit.record(kb=chunk.knowledge_base, actor=actor, action=AuditAction.ITEM_TAGS_EDITED,
                 target=f"{item.name} · {chunk}")
    epochs.bump_epoch(kb_id=chunk.knowledge_base_id)
    return tag


@transaction.atomic
def remove_tag(*, tag: ChunkItem, actor: Actor) -> None:
    """A tag removed; a detected one comes back at the next detection unless it is excluded."""
    kb = tag.chunk.knowledge_base
    audit.record(kb=kb, actor=actor, action=AuditAction.ITEM_TAGS_EDITED, target=f"{tag.item.name} · {tag.chunk}")
    tag.delete()
    epochs.bump_epoch(kb_id=kb.pk)


def _catalog_changed(*, kb_id: int) -> None:
    epochs.bump_epoch(kb_id=kb_id)
    schedule_retag(kb_id=kb_id)
