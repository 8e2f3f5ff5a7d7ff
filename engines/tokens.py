"""Token counting with the Qwen tokenizer that the dashscope package ships (works offline).

Chunk sizes, rerank budgets and context budgets are all measured in these tokens, so the numbers
mean the same thing whichever provider serves the models.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _tokenizer():
    from dashscope import get_tokenizer

    return get_tokenizer("qwen-turbo")


def count_tokens(text: str) -> int:
    if not text:
        return 0
    return len(_tokenizer().encode(text))


def encode(text: str) -> list[int]:
    return list(_tokenizer().encode(text)) if text else []


def decode(token_ids: list[int]) -> str:
    return _tokenizer().decode(token_ids) if token_ids else ""


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` within `max_tokens` tokens."""
    ids = encode(text)
    if len(ids) <= max_tokens:
        return text
    return decode(ids[:max_tokens])
