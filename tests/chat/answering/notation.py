"""The extractive answerer driven by messages in the request notation (`chat.answering.notation`),
as the composer's tests drove it before it read typed evidence."""

from __future__ import annotations

from collections.abc import Iterator

from chat.answering.extractive import ExtractiveAnswerer
from chat.answering.notation import parse as request_from

__all__ = ["PromptAnswerer", "request_from"]


class PromptAnswerer:
    def __init__(self, **options) -> None:
        self.inner = ExtractiveAnswerer(**options)

    def stream(self, messages, *, max_tokens: int = 1024, temperature: float = 0.2) -> Iterator[str]:
        return self.inner.stream(request_from(messages), max_tokens=max_tokens)

    def complete(self, messages, *, max_tokens: int = 1024, temperature: float = 0.2) -> str:
        return "".join(self.stream(messages, max_tokens=max_tokens))
