"""The answerer port: typed evidence in, the answer's text streamed out (markdown with
`[来源 N](citation://N)` markers and `![…](asset://ID)` images, which the pipeline's filter
enforces whoever wrote them)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Protocol, runtime_checkable

from .request import AnswerRequest, AnswerSource


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


@runtime_checkable
class EvidenceJudge(Protocol):
    """Whether the evidence answers the question, decided once for every answerer: a question the
    sources answer reaches the model too, whatever single word they lack."""

    threshold: float  # a source whose best unit's chance reaches this answers

    def chances(self, question: str, sources: Sequence[AnswerSource]) -> list[float]:
        """Per source, the chance that its best unit holds the answer."""
        ...
