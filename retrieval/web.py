"""Web results as retrieval candidates, for a request with `enable_web_search` on a service that
has a web search (`RetrievalService(web_search=…)`, given only to knowledge bases that switched
it on).

The search runs on the retrieval pool while the knowledge base's channels run. Its pages become
one more ranked list, "web", that is fused (and reranked) with the channels' lists. A page is a
candidate whose id is negative (-1, -2, … in the search's order), so it can never be taken for
a chunk: it is not looked up in the database, expanded or given assets, and the result built
from it is marked `source_kind="web"` with the page's title, site and address.

The search has a budget: the adapter's own timeout plus a moment for its error to arrive. A
search that fails or runs out leaves the knowledge base's results as they are; the service
records why (`web_search_failed` and the error's code).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, replace

from engines.ports import WebResult, WebSearch, WebSearchError, WebSearchTimeout

from .contracts import RetrievalCancelled, RetrievalResult
from .fusion import RankedHit
from .repository import ChunkRow

WEB_CHANNEL = "web"
# Beyond the adapter's timeout: long enough for its own typed error to arrive first.
HANDOVER_SECONDS = 0.5
_POLL_SECONDS = 0.05


def is_web_id(candidate_id: int) -> bool:
    """Chunk ids are positive row ids; web candidates count down from -1."""
    return candidate_id < 0


@dataclass(frozen=True)
class WebCandidates:
    """The pages of one search, in its order; empty when there was none or it failed."""

    pages: tuple[WebResult, ...] = ()

    def ranked(self) -> list[RankedHit]:
        """The "web" list for fusion. Its scores fall evenly with the rank (1, …, 1/n): fusion
        min-max normalises each list, so only the order and the spacing matter."""
        count = len(self.pages)
        return [
            RankedHit(candidate_id, candidate_id, (count - index) / count)
            for index, candidate_id in enumerate(self._ids())
        ]

    def rows(self) -> dict[int, ChunkRow]:
        """Each page as the row fusion, rerank and relevance read: its title, its snippet."""
        return {
            candidate_id: ChunkRow(
                id=candidate_id, document_id=candidate_id, document_title=page.title, ordinal=0,
                parent_id="", heading_path=(), locator={}, content_type="text", content=page.snippet,
                token_count=0, asset_ids=(), preview_url=None, kb_id=0,
            )
            for candidate_id, page in zip(self._ids(), self.pages, strict=True)
        }

    def marked(self, results: Sequence[RetrievalResult]) -> tuple[RetrievalResult, ...]:
        """`results` with each web candidate's result saying where its page is."""
        pages = dict(zip(self._ids(), self.pages, strict=True))
        return tuple(
            replace(result, source_kind="web", url=pages[result.chunk_id].url, site=pages[result.chunk_id].site,
                    kb_id=0, context_chunk_ids=())
            if result.chunk_id in pages else result
            for result in results
        )

    def _ids(self) -> range:
        return range(-1, -len(self.pages) - 1, -1)


NO_WEB = WebCandidates()


@dataclass(frozen=True)
class WebOutcome:
    candidates: WebCandidates
    elapsed_ms: float
    error: WebSearchError | None = None


class PendingWebSearch:
    """A search running on the pool while the knowledge base's channels run."""

    def __init__(self, *, search: WebSearch, query: str, executor: Executor) -> None:
        self.started = time.perf_counter()
        self.budget = search.timeout + HANDOVER_SECONDS
        self._future: Future = executor.submit(_timed, search, query)

    def outcome(self, *, cancel: threading.Event | None) -> WebOutcome:
        """Waits for the search within its budget, in short slices so a set `cancel` raises
        `RetrievalCancelled` at once. A search still running past its budget is left to end on
        its own timeout; its results are not waited for."""
        deadline = self.started + self.budget
        while not self._future.done():
            if cancel is not None and cancel.is_set():
                self._future.cancel()
                raise RetrievalCancelled("retrieval cancelled by the caller")
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                self._future.cancel()
                return WebOutcome(NO_WEB, round(self.budget * 1000, 2),
                                  WebSearchTimeout("web search ran past its budget"))
            wait_futures([self._future], timeout=min(_POLL_SECONDS, remaining))
        try:
            pages, elapsed_ms = self._future.result()
        except WebSearchError as exc:
            return WebOutcome(NO_WEB, _elapsed_ms(self.started), exc)
        return WebOutcome(WebCandidates(tuple(pages)), elapsed_ms)


def _timed(search: WebSearch, query: str) -> tuple[list[WebResult], float]:
    started = time.perf_counter()
    pages = search.search(query)
    return pages, _elapsed_ms(started)


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


__all__ = ["NO_WEB", "PendingWebSearch", "WEB_CHANNEL", "WebCandidates", "WebOutcome", "is_web_id"]
