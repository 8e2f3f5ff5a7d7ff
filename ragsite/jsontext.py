"""JSON read from a client: the one decoder every entry point uses (DRF's parser, the streaming
views, the OpenAI-compatible endpoint, the WebSocket).

Python's decoder recurses once per nesting level: 100,000 `[` raise RecursionError, which is not
a ValueError and escaped every view as a 500 (and reset the WebSocket). A document nested a few
hundred levels deep decodes, then exhausts the stack of whatever walks it next (a serializer, a
filter parser, `json.dumps` into a trace). No request of ours nests more than a few levels, so
anything deeper than MAX_DEPTH is refused as invalid JSON, as NaN and Infinity are (they are
Python's, not JSON's).
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 32


class InvalidJson(ValueError):
    """The text is not JSON a request may carry; the message says why (in English, for logs)."""


def parse_json(text: str | bytes | bytearray) -> Any:
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidJson(f"nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError and undecodable bytes
        raise InvalidJson(str(exc)) from None
    if too_deep(value):
        raise InvalidJson(f"nested deeper than {MAX_DEPTH} levels")
    return value


def too_deep(value: Any, *, limit: int = MAX_DEPTH) -> bool:
    """Whether lists and objects nest deeper than `limit` (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _refuse_constant(constant: str):
    raise ValueError(f"{constant} is not JSON")
