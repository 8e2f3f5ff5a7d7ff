"""Web search adapters (`engines.ports.WebSearch`): an MCP client (`mcp.py`, a configured MCP
server's search tool over streamable HTTP, Bailian's WebSearch MCP being the reference) and a
plain HTTP JSON client (`http.py`, a SearXNG-style `GET ?q=…&format=json`). Which one runs is
the dotted path in RAG_WEB_SEARCH_BACKEND (`engines.providers.get_web_search`).

What both read back is normalised here once: search services name the same fields differently
(title / name, url / link, snippet / content / description, site / hostname), so every entry is
read through the same aliases, entries without an http(s) address or without any text are
dropped, lengths are capped, and duplicates of one address are kept once.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from engines.ports import WebResult

DEFAULT_TIMEOUT_SECONDS = 5.0
DEFAULT_RESULT_COUNT = 5
# More would only crowd the knowledge base's own candidates out of the fused list.
MAX_RESULT_COUNT = 20
MAX_TITLE_CHARS = 200
MAX_SITE_CHARS = 100
MAX_SNIPPET_CHARS = 1000
MAX_URL_CHARS = 2048
# Bytes of one response read at most: a search answer is a few kilobytes.
MAX_RESPONSE_BYTES = 2 * 1024 * 1024

# Where the list of results sits in a response object, in the order they are tried.
RESULT_LIST_KEYS = ("pages", "results", "items", "data", "organic_results", "webPages", "value")
_TITLE_KEYS = ("title", "name")
_URL_KEYS = ("url", "link", "href")
_SNIPPET_KEYS = ("snippet", "content", "description", "summary", "text")
_SITE_KEYS = ("site", "hostname", "site_name", "source")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, kw_only=True)
class WebSearchConfig:
    """Where and how an adapter searches. Empty names mean the adapter's own defaults (the MCP
    adapter: Bailian's `bailian_web_search` with `query` and `count`; the HTTP adapter: `q`, no
    count sent). The key never shows in `repr`."""

    url: str
    api_key: str = field(default="", repr=False)
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    count: int = DEFAULT_RESULT_COUNT
    tool: str = ""
    query_argument: str = ""
    count_argument: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_RESULT_COUNT:
            raise ValueError(f"the web search result count lies in 1..{MAX_RESULT_COUNT}")
        if self.timeout <= 0:
            raise ValueError("the web search timeout must be positive")
        if urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError("the web search URL must be http(s)")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def result_entries(payload: Any) -> list[Any] | None:
    """The list of result entries in a decoded response: the payload itself when it is a list,
    else the first list under one of `RESULT_LIST_KEYS` (one level of nesting, e.g.
    `{"data": {"pages": [...]}}`); None when there is none (not a search response)."""
    if isinstance(payload, list):
        return payload
    if not isinstance(payload, Mapping):
        return None
    for key in RESULT_LIST_KEYS:
        value = payload.get(key)
        if isinstance(value, list):
            return value
        if isinstance(value, Mapping):
            nested = result_entries(value)
            if nested is not None:
                return nested
    return None


def web_results(entries: Iterable[Any], *, count: int) -> list[WebResult]:
    """At most `count` results from raw entries, in their order, ranked 1…n after filtering."""
    results: list[WebResult] = []
    seen: set[str] = set()
    for entry in entries:
        if len(results) >= count:
            break
        if not isinstance(entry, Mapping):
            continue
        url = _web_url(_first_text(entry, _URL_KEYS))
        snippet = _clipped(_first_text(entry, _SNIPPET_KEYS), MAX_SNIPPET_CHARS)
        if url is None or not snippet or url in seen:
            continue
        seen.add(url)
        site = _clipped(_first_text(entry, _SITE_KEYS), MAX_SITE_CHARS) or (urlsplit(url).hostname or "")
        title = _clipped(_first_text(entry, _TITLE_KEYS), MAX_TITLE_CHARS) or site
        results.append(WebResult(title=title, url=url, site=site, snippet=snippet, rank=len(results) + 1))
    return results


def _first_text(entry: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    for key in keys:
        value = entry.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def _clipped(text: str, limit: int) -> str:
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _web_url(raw: str) -> str | None:
    """The address when it is a plain http(s) URL a reader may be shown; None otherwise.

    A `javascript:` or `data:` address is never a web source; neither is one with a user part
    (`https://bank.example@evil.example/` reads as the bank but opens the other host)."""
    url = raw.strip()
    # Spaces, control and format characters (bidi overrides) would show one address and open another.
    if not url or len(url) > MAX_URL_CHARS or any(ch.isspace() or unicodedata.category(ch)[0] == "C" for ch in url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return None
    return url
