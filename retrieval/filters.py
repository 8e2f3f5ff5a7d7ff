"""Metadata filters: read from JSON at the edges (API, hit test, chat, evaluation), and turned
into the READY documents they admit (the facts repository).

The JSON of one filter:

    {"field": "部门", "op": "eq", "value": "人力资源部"}
    {"field": "file_type", "op": "in", "value": ["pdf", "docx"]}
    {"field": "生效日期", "op": "range", "gte": "2025-01-01", "lte": "2025-12-31"}

`field` is a built-in (`title`, `file_type`, `source_tag`, `created_at`, `updated_at`, `item`) or
a key of the document's attributes, written bare or as "attributes.<key>" (the prefix is needed
only for a key that is a built-in's name). `eq` matches one value — an attribute holding a list
matches when one of its items is that value; `in` any of up to 50 values; `range` is inclusive,
with numbers (numbers written as text count) or ISO dates (YYYY-MM-DD; an attribute's date with
a time is compared on its date). `created_at` / `updated_at` compare dates in the deployment's
time zone; `item` admits documents with a chunk tagged with the item of that name (a tag staff
marked "excluded" does not count). Every filter of a request must hold (AND).

SQL through the ORM only, and only what SQLite and PostgreSQL both run: JSON key transforms,
never JSONField `contains` (SQLite has none), and comparisons guarded by the value's shape so a
text never compares with a number.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date

from django.db.models import Case, CharField, Exists, FloatField, OuterRef, Q, QuerySet, When
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Substr
from django.utils.translation import gettext as _

from knowledge.attributes import MAX_LIST_ITEMS, MAX_VALUE_CHARS, key_problem, storable_number, unsafe_text
from knowledge.models import ChunkItem, Document, TagSource
from ragsite.errors import ValidationFailed
from ragsite.jsontext import InvalidJson, parse_json

from .contracts import (
    ATTRIBUTE_FIELD_PREFIX,
    BUILTIN_FILTER_FIELDS,
    DATE_FILTER_FIELDS,
    FILTER_OPS,
    MAX_FILTER_VALUES,
    MAX_FILTERS,
    FilterScalar,
    MetadataFilter,
)

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# The shapes a value's text must have before the database converts it: a number, or a text
# starting with an ISO date (the same pattern in Python's `re` for SQLite and PostgreSQL's `~`).
_NUMBER_TEXT = r"^-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$"
_DATE_TEXT = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}"
_KEYS = {"field", "op", "value", "gte", "lte"}
# The built-ins that are texts, and the column each reads.
_TEXT_COLUMNS = {"title": "title", "file_type": "file_type", "source_tag": "source_tag"}


class InvalidFilter(ValidationFailed):
    code = "invalid_filter"


# --- JSON → MetadataFilter ----------------------------------------------------------------------


def parse_filters(data: object) -> tuple[MetadataFilter, ...]:
    """A JSON list of filters (or one filter object; or the JSON text of either, as a form or a
    multipart body sends it), validated; InvalidFilter names the first problem."""
    if isinstance(data, str):
        if not data.strip():
            return ()
        try:
            data = parse_json(data)
        except InvalidJson as exc:
            raise InvalidFilter(_("筛选条件必须是 JSON，例如 [{\"field\": \"部门\", \"op\": \"eq\", \"value\": \"人力资源部\"}]。")) from exc
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise InvalidFilter(_("筛选条件必须是由对象组成的列表。"))
    if len(data) > MAX_FILTERS:
        raise InvalidFilter(_("筛选条件最多 %(n)s 个。") % {"n": MAX_FILTERS})
    return tuple(dict.fromkeys(parse_filter(item, number=number) for number, item in enumerate(data, 1)))


def parse_filter(data: object, *, number: int = 1) -> MetadataFilter:
    """One filter object; `number` (1-based) names it in the error."""
    try:
        return _parse(data)
    except _Problem as problem:
        raise InvalidFilter(
            _("第 %(n)s 个筛选条件：%(problem)s") % {"n": number, "problem": problem.message}, filter=number
        ) from None


class _Problem(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _parse(data: object) -> MetadataFilter:
    if not isinstance(data, dict):
        raise _Problem(_("必须是对象，例如 {\"field\": \"部门\", \"op\": \"eq\", \"value\": \"人力资源部\"}。"))
    unknown = sorted(str(key) for key in data if key not in _KEYS)
    if unknown:
        raise _Problem(_("不认识的键 %(keys)s（可用 field、op、value、gte、lte）。") % {"keys": "、".join(map(_quoted, unknown))})
    field = _field(data.get("field"))
    op = data.get("op")
    if op not in FILTER_OPS:
        raise _Problem(_("不认识的运算“%(op)s”（可用 eq、in、range）。") % {"op": _quoted(op)})
    if op == "range":
        if "value" in data:
            raise _Problem(_("range 用 gte / lte 给出上下限，不用 value。"))
        return _range(field, data.get("gte"), data.get("lte"))
    if "gte" in data or "lte" in data:
        raise _Problem(_("gte / lte 只用于 range。"))
    if "value" not in data:
        raise _Problem(_("缺少 value。"))
    if op == "eq":
        return MetadataFilter(field=field, op="eq", value=_scalar(field, data["value"]))
    values = data["value"]
    if not isinstance(values, list) or not values:
        raise _Problem(_("in 的 value 必须是非空列表。"))
    if len(values) > MAX_FILTER_VALUES:
        raise _Problem(_("in 最多 %(n)s 个值。") % {"n": MAX_FILTER_VALUES})
    return MetadataFilter(field=field, op="in", value=tuple(dict.fromkeys(_scalar(field, v) for v in values)))


def _field(field: object) -> str:
    if not isinstance(field, str) or not field.strip():
        raise _Problem(_("缺少 field（内置字段 %(fields)s，或自定义元数据的键）。") % {"fields": "、".join(BUILTIN_FILTER_FIELDS)})
    if field in BUILTIN_FILTER_FIELDS:
        return field
    key = field.removeprefix(ATTRIBUTE_FIELD_PREFIX)
    problem = key_problem(key)
    if problem:
        raise _Problem(problem)
    return ATTRIBUTE_FIELD_PREFIX + key


def _scalar(field: str, value: object) -> FilterScalar:
    if isinstance(value, str) and unsafe_text(value):
        raise _Problem(_("值不能包含控制字符。"))
    if field in DATE_FILTER_FIELDS:
        return _date(value).isoformat()
    if field in BUILTIN_FILTER_FIELDS:  # a text column, or an item's name
        if not isinstance(value, str) or not value.strip():
            raise _Problem(_("%(field)s 的值必须是文字。") % {"field": field})
        if len(value) > MAX_VALUE_CHARS:
            raise _Problem(_("值过长（最多 %(n)s 个字符）。") % {"n": MAX_VALUE_CHARS})
        text = value.strip()
        return text.lower() if field == "file_type" else text
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        if not storable_number(value):
            raise _Problem(_("数字必须是有限的，整数的绝对值不超过 2^53−1。"))
        return value
    if isinstance(value, str) and value.strip():
        if len(value) > MAX_VALUE_CHARS:
            raise _Problem(_("值过长（最多 %(n)s 个字符）。") % {"n": MAX_VALUE_CHARS})
        return value.strip()
    raise _Problem(_("值只能是文字、数字或 true/false。"))


def _range(field: str, gte: object, lte: object) -> MetadataFilter:
    if gte is None and lte is None:
        raise _Problem(_("range 至少需要 gte 或 lte。"))
    if field in BUILTIN_FILTER_FIELDS and field not in DATE_FILTER_FIELDS:
        raise _Problem(_("%(field)s 不能按范围筛选（只能用 eq 或 in）。") % {"field": field})
    bounds = [bound for bound in (gte, lte) if bound is not None]
    if all(_is_number(bound) for bound in bounds) and field not in DATE_FILTER_FIELDS:
        low, high = gte, lte
    elif all(isinstance(bound, str) for bound in bounds):
        low, high = (_date(bound).isoformat() if bound is not None else None for bound in (gte, lte))
    else:
        raise _Problem(_("range 的上下限必须都是数字，或都是 ISO 日期（如 2025-01-01）。"))
    if low is not None and high is not None and low > high:
        raise _Problem(_("range 的 gte 大于 lte，不会有文档符合。"))
    return MetadataFilter(field=field, op="range", gte=low, lte=high)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and storable_number(value)


def _date(value: object) -> date:
    if isinstance(value, str) and _ISO_DATE.fullmatch(value.strip()):
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise _Problem(_("“%(value)s”不是 ISO 日期（如 2025-01-01）。") % {"value": _quoted(value)})


def _quoted(value: object) -> str:
    """A value of the request as an error may quote it: short, and with what could not be
    written into the response (a lone surrogate) or read (a control character) escaped."""
    text = str(value)[:40]
    return "".join(ch.encode("unicode_escape").decode() if unsafe_text(ch) else ch for ch in text)


# --- MetadataFilter → the documents it admits -----------------------------------------------------


def admitted(documents: QuerySet[Document], filters: Sequence[MetadataFilter]) -> QuerySet[Document]:
    """`documents` narrowed to those every filter admits (one query, whatever their number)."""
    for index, metadata_filter in enumerate(filters):
        documents = _narrowed(documents, metadata_filter, alias=f"_metadata_filter_{index}")
    return documents


def _narrowed(documents: QuerySet[Document], f: MetadataFilter, *, alias: str) -> QuerySet[Document]:
    values = f.value if isinstance(f.value, tuple) else (f.value,)
    if f.field == "item":
        tagged = ChunkItem.objects.filter(
            document_id=OuterRef("pk"), item__knowledge_base_id=OuterRef("knowledge_base_id"), item__name__in=values,
        ).exclude(source=TagSource.EXCLUDED)
        return documents.filter(Exists(tagged))
    if f.field in _TEXT_COLUMNS:
        return documents.filter(**{f"{_TEXT_COLUMNS[f.field]}__in": values})
    if f.field in DATE_FILTER_FIELDS:
        if f.op == "range":
            bounds = {f"{f.field}__date__{name}": date.fromisoformat(getattr(f, name))
                      for name in ("gte", "lte") if getattr(f, name) is not None}
            return documents.filter(**bounds)
        return documents.filter(**{f"{f.field}__date__in": [date.fromisoformat(v) for v in values]})
    key = f.attribute
    assert key is not None, f.field
    if f.op == "range":
        return _in_range(documents, f, key=key, alias=alias)
    # The value itself, or an item of a list value: a list is read by position (it has at most
    # MAX_LIST_ITEMS), as SQLite's JSON cannot ask whether a list contains a value.
    documents = documents.alias(**{alias: KeyTransform(key, "attributes")})
    condition = Q(**{f"{alias}__in": values})
    texts = [value for value in values if isinstance(value, str)]
    if texts:
        for position in range(MAX_LIST_ITEMS):
            condition |= Q(**{f"{alias}__{position}__in": texts})
    return documents.filter(condition)


def _in_range(documents: QuerySet[Document], f: MetadataFilter, *, key: str, alias: str) -> QuerySet[Document]:
    text = f"{alias}_text"
    documents = documents.alias(**{text: KeyTextTransform(key, "attributes")})
    numeric = _is_number(f.gte) or _is_number(f.lte)
    # Converted only where the text has the shape (CASE): a text beside a number would compare by
    # type (SQLite, PostgreSQL's jsonb each in its own order), and casting it would fail.
    if numeric:
        comparable = Case(When(**{f"{text}__regex": _NUMBER_TEXT}, then=Cast(text, FloatField())),
                          default=None, output_field=FloatField())
    else:
        comparable = Case(When(**{f"{text}__regex": _DATE_TEXT}, then=Substr(text, 1, 10)),
                          default=None, output_field=CharField())
    documents = documents.alias(**{alias: comparable})
    bounds = {f"{alias}__{name}": getattr(f, name) for name in ("gte", "lte") if getattr(f, name) is not None}
    return documents.filter(**bounds)
