"""Staff's own key/value metadata of a document (`Document.attributes`), checked the same way
wherever it is written: an upload, the admin's document page, `PATCH …/documents/{id}/`.

The shape is kept small and flat because retrieval filters on it in SQL, on SQLite and
PostgreSQL alike (`retrieval.filters`): a value is a string, a number, a boolean or a list of
strings; no nesting, no null.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Mapping

from django.utils.translation import gettext as _

from ragsite.errors import ValidationFailed
from ragsite.jsontext import InvalidJson, parse_json

MAX_ATTRIBUTE_KEYS = 50
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 500
# A list value is read item by item (SQLite's JSON has no "contains"), so it stays short.
MAX_LIST_ITEMS = 20
MAX_ATTRIBUTES_BYTES = 16 * 1024  # the whole object as UTF-8 JSON

AttributeValue = str | int | float | bool | list[str]

# A key of digits only is read as a list index by the databases' JSON paths ($[3], -> 3):
# it could never be filtered on as a key.
_DIGITS = re.compile(r"\d+")


class InvalidAttributes(ValidationFailed):
    code = "invalid_attributes"


def key_problem(key: object) -> str | None:
    """Why `key` cannot be an attribute key (in the reader's words), None when it can. Filters
    name attribute keys by the same rules."""
    if not isinstance(key, str) or not key.strip():
        return _("键不能为空。")
    if unsafe_text(key) or '"' in key or "\\" in key:
        # Not quoted back: a lone surrogate could not even be written into the response.
        return _("键不能包含引号、反斜杠或控制字符。")
    if key != key.strip():
        return _("键“%(key)s”的首尾不能有空格。") % {"key": key}
    if len(key) > MAX_KEY_CHARS:
        return _("键“%(key)s”过长（最多 %(n)s 个字符）。") % {"key": key[:MAX_KEY_CHARS] + "…", "n": MAX_KEY_CHARS}
    if _DIGITS.fullmatch(key):
        return _("键“%(key)s”不能只由数字组成。") % {"key": key}
    return None


def clean_attributes(value: object) -> dict[str, AttributeValue]:
    """`value` as it is stored, or InvalidAttributes saying the first problem. A JSON object's
    text (a multipart field, a form) is read first; strings are trimmed, repeated list items
    dropped."""
    if isinstance(value, str):
        try:
            value = parse_json(value) if value.strip() else {}
        except InvalidJson as exc:
            raise InvalidAttributes(_("元数据必须是 JSON 对象，例如 {\"部门\": \"人力资源部\"}。")) from exc
    if not isinstance(value, Mapping):
        raise InvalidAttributes(_("元数据必须是 JSON 对象，例如 {\"部门\": \"人力资源部\"}。"))
    if len(value) > MAX_ATTRIBUTE_KEYS:
        raise InvalidAttributes(_("元数据最多 %(n)s 个键。") % {"n": MAX_ATTRIBUTE_KEYS})
    cleaned: dict[str, AttributeValue] = {}
    for key, item in value.items():
        problem = key_problem(key)
        if problem:
            raise InvalidAttributes(problem)
        cleaned[key] = _clean_value(key, item)
    if len(json.dumps(cleaned, ensure_ascii=False).encode()) > MAX_ATTRIBUTES_BYTES:
        raise InvalidAttributes(_("元数据过大（最多 %(n)s KB）。") % {"n": MAX_ATTRIBUTES_BYTES // 1024})
    return cleaned


def _clean_value(key: str, value: object) -> AttributeValue:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        if not storable_number(value):
            raise InvalidAttributes(_("键“%(key)s”的值必须是有限的数字，整数的绝对值不超过 2^53−1"
                                      "（更长的编号请写成文字）。") % {"key": key})
        return value
    if isinstance(value, str):
        return _clean_text(key, value)
    if isinstance(value, list):
        if len(value) > MAX_LIST_ITEMS:
            raise InvalidAttributes(_("键“%(key)s”的列表最多 %(n)s 项。") % {"key": key, "n": MAX_LIST_ITEMS})
        if not all(isinstance(item, str) for item in value):
            raise InvalidAttributes(_("键“%(key)s”的列表只能包含文字。") % {"key": key})
        return list(dict.fromkeys(_clean_text(key, item) for item in value))
    raise InvalidAttributes(
        _("键“%(key)s”的值只能是文字、数字、true/false 或文字列表。") % {"key": key}
    )


def _clean_text(key: str, text: str) -> str:
    text = text.strip()
    if not text:
        raise InvalidAttributes(_("键“%(key)s”的值不能为空；不需要的键请删除。") % {"key": key})
    if len(text) > MAX_VALUE_CHARS:
        raise InvalidAttributes(
            _("键“%(key)s”的值过长（最多 %(n)s 个字符）。") % {"key": key, "n": MAX_VALUE_CHARS}
        )
    if unsafe_text(text):
        # PostgreSQL's jsonb refuses NUL outright; the others are invisible in every page.
        raise InvalidAttributes(_("键“%(key)s”的值不能包含控制字符。") % {"key": key})
    return text


# The largest integer every JSON reader keeps exactly (JavaScript's Number.MAX_SAFE_INTEGER); also
# within what SQLite binds as an integer and what a float compares without rounding.
MAX_SAFE_INTEGER = 2**53 - 1


def storable_number(value: int | float) -> bool:
    """A finite float, or an integer no reader rounds. A JSON integer has no size limit in
    Python: 1 followed by 400 zeros made `math.isfinite` raise OverflowError (a 500)."""
    if isinstance(value, int):
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    return math.isfinite(value)


def unsafe_text(text: str) -> bool:
    """A control character or a lone surrogate: PostgreSQL cannot store or compare either (NUL
    in text, a surrogate in UTF-8), and neither means anything to a reader."""
    return any(unicodedata.category(ch) in ("Cc", "Cs") for ch in text)


def attributes_summary(attributes: Mapping[str, object], *, limit: int = 3) -> str:
    """"地区=华东、华南；部门=人力资源部…" for a list column; "" when there are none. By key: the
    databases keep a JSON object's keys in different orders (PostgreSQL's jsonb sorts them)."""
    parts = []
    for key, value in sorted(attributes.items())[:limit]:
        shown = "、".join(value) if isinstance(value, list) else json.dumps(value, ensure_ascii=False).strip('"')
        parts.append(f"{key}={shown}")
    return "；".join(parts) + ("…" if len(attributes) > limit else "")
