"""The answerer port: typed evidence in, the answer's text streamed out (markdown with
`[来源 N](citation://N)` markers and `![…](asset://ID)` images, which the pipeline's filter
enforces whoever wrote them)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Protocol, runtime_checkable

from .request import AnswerRequest


@runtime_checkable
class Answerer(Protocol):
    name: str  # recorded on the trace as the answer's model

    def stream(self, request: AnswerRequest, *, max_tokens: int, temperature: float) -> Iterator[str]:
        """The answer's deltas. Raises `engines.ports.ProviderError` when it cannot answer."""
        ...


@runtime_checkable
class AsyncAnswerer(Answerer, Protocol):
    """An answerer that waits on a remote model: streamed on the event loop, no thread held."""

    def astream(self, request: AnswerRequest, *, max_tokens: int, temperature: float) -> AsyncIterator[str]:
        ...
