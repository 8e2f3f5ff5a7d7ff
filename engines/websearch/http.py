"""Web search through a plain HTTP JSON endpoint: `GET {url}?q=…&format=json`, as SearXNG
answers it (`{"results": [{"title", "url", "content", …}]}`); any endpoint that takes the query
as a parameter and answers a list of results in the shapes `engines.websearch` reads works.

The body is read up to `MAX_RESPONSE_BYTES` and never echoed: an error says the status, not what
the server wrote (it may repeat the question or the key).
"""

from __future__ import annotations

import json
import logging
import time

import httpx2

from engines.ports import WebResult, WebSearchBadResponse, WebSearchTimeout, WebSearchUnavailable

from . import MAX_RESPONSE_BYTES, WebSearchConfig, result_entries, web_results

logger = logging.getLogger("engines.websearch")

DEFAULT_QUERY_ARGUMENT = "q"


class HttpWebSearch:
    def __init__(self, *, config: WebSearchConfig) -> None:
        self.config = config
        self.name = "http"
        self.timeout = config.timeout

    def search(self, query: str) -> list[WebResult]:
        params: dict[str, str | int] = {
            self.config.query_argument or DEFAULT_QUERY_ARGUMENT: query, "format": "json",
        }
        if self.config.count_argument:
            params[self.config.count_argument] = self.config.count
        body = self._get(params)
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            logger.warning("web search: the endpoint answered something other than JSON")
            raise WebSearchBadResponse("web search: the endpoint answered something other than JSON") from None
        entries = result_entries(payload)
        if entries is None:
            raise WebSearchBadResponse("web search: the endpoint's JSON holds no list of results")
        return web_results(entries, count=self.config.count)

    def _get(self, params: dict[str, str | int]) -> bytes:
        # httpx's timeouts bound each read, not the whole answer: the deadline does.
        deadline = time.monotonic() + self.timeout
        headers = {"Accept": "application/json", **self.config.headers}
        try:
            with httpx2.Client(timeout=httpx2.Timeout(self.timeout), follow_redirects=False) as client:
                with client.stream("GET", self.config.url, params=params, headers=headers) as response:
                    if response.status_code != 200:
                        logger.warning("web search: HTTP %s", response.status_code)
                        raise WebSearchUnavailable(f"web search: HTTP {response.status_code}")
                    chunks: list[bytes] = []
                    size = 0
                    for chunk in response.iter_bytes():
                        size += len(chunk)
                        if size > MAX_RESPONSE_BYTES:
                            raise WebSearchBadResponse("web search: the answer is larger than a search result")
                        if time.monotonic() > deadline:
                            raise WebSearchTimeout("web search timed out")
                        chunks.append(chunk)
                    return b"".join(chunks)
        except httpx2.TimeoutException:
            logger.warning("web search timed out")
            raise WebSearchTimeout("web search timed out") from None
        except httpx2.HTTPError as exc:
            logger.warning("web search: endpoint unavailable (%s)", type(exc).__name__)
            raise WebSearchUnavailable(f"web search: endpoint unavailable ({type(exc).__name__})") from None
