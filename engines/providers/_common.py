"""Pieces shared by the remote adapters (`dashscope.py`, `openai_compat.py`).

Connection settings, retry policy, request budgets, response validation and stream relaying live
here once, so both providers fail the same way for the same reasons and the tests of one cover
the rules of the other.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import random
import re
import time
import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Generic, TypeVar

from engines.ports import (
    ChatMessage,
    ProviderBadResponse,
    ProviderError,
    ProviderInputTooLarge,
    ProviderRateLimited,
    ProviderUnavailable,
    RerankScore,
)
from engines.tokens import count_tokens

logger = logging.getLogger("engines.providers")

T = TypeVar("T")
C = TypeVar("C")  # a provider's connection

# --- retries ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, applied to 429 and 5xx answers only.

    Timeouts and connection failures are not retried here: a timed-out call already spent its
    whole budget, and the pipelines degrade (skip rewrite, keep fusion order) faster than a retry.
    """

    max_retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 8.0

    def delay(self, retry_number: int) -> float:
        ceiling = min(self.max_delay, self.base_delay * (2**retry_number))
        # "Equal jitter": never less than half the backoff, so a burst of clients spreads out
        # without any of them hammering the provider immediately again.
        return ceiling / 2 + random.uniform(0, ceiling / 2)


class RetryableError(Exception):
    """Raised by one attempt when the provider asked us to come back later (429 / 5xx)."""

    def __init__(self, error: ProviderError) -> None:
        super().__init__(str(error))
        self.error = error


def call_with_retries(attempt: Callable[[], T], policy: RetryPolicy, *, what: str) -> T:
    for retry_number in range(policy.max_retries + 1):
        try:
            return attempt()
        except RetryableError as exc:
            time.sleep(_pause_before_retry(exc, retry_number, policy, what=what))
    raise AssertionError("unreachable")  # pragma: no cover


async def acall_with_retries(attempt: Callable[[], Awaitable[T]], policy: RetryPolicy, *, what: str) -> T:
    """`call_with_retries` on the event loop: the pauses are `asyncio.sleep`, no thread waits."""
    for retry_number in range(policy.max_retries + 1):
        try:
            return await attempt()
        except RetryableError as exc:
            await asyncio.sleep(_pause_before_retry(exc, retry_number, policy, what=what))
    raise AssertionError("unreachable")  # pragma: no cover


def _pause_before_retry(exc: RetryableError, retry_number: int, policy: RetryPolicy, *, what: str) -> float:
    """The pause before the next attempt; the port error once the retries are spent."""
    if retry_number >= policy.max_retries:
        raise exc.error from None
    pause = policy.delay(retry_number)
    logger.info("%s: %s, retry %d of %d in %.2fs", what, exc.error.code, retry_number + 1, policy.max_retries, pause)
    return pause


_SAFE_CODE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def status_error(*, provider: str, what: str, status: int, code: object = None) -> ProviderError:
    """The port error for an HTTP error status; retryable ones come wrapped in RetryableError.

    Only the status and the provider's short error code reach the message: provider bodies may
    echo request content or headers.
    """
    detail = f"HTTP {status}"
    if isinstance(code, str) and _SAFE_CODE.match(code):
        detail += f" {code}"
    if status == 429:
        return ProviderRateLimited(f"{provider} {what}: rate limited ({detail})")
    if status >= 500:
        return ProviderUnavailable(f"{provider} {what}: server error ({detail})")
    if status in (401, 403):
        return ProviderUnavailable(f"{provider} {what}: credentials rejected ({detail})")
    if status == 413:
        return ProviderInputTooLarge(f"{provider} {what}: request too large ({detail})")
    return ProviderUnavailable(f"{provider} {what}: request rejected ({detail})")


def is_retryable_status(status: int) -> bool:
    return status == 429 or status >= 500


# --- connection settings ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ConnectionSettings:
    """Where and how an adapter reaches its provider; one instance can serve all its adapters.

    Which of `api_key` / `base_url` is required depends on the provider: DashScope needs a key
    and defaults the endpoint, an OpenAI-compatible server needs an endpoint and may have no key.
    `timeout` None means the adapter's own default (30 s; 60 s for chat and captions). The key
    never shows in `repr`.
    """

    api_key: str = field(default="", repr=False)
    base_url: str = ""
    timeout: float | None = None
    max_retries: int = 2
    retry_base_delay: float = 0.5
    retry_max_delay: float = 8.0

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy(
            max_retries=self.max_retries,
            base_delay=self.retry_base_delay,
            max_delay=self.retry_max_delay,
        )


class RemoteAdapter(Generic[C]):
    """Model, display name and live connection of one remote adapter. Subclasses add only what
    is specific to them (limits, batch sizes) and say how to open their provider's connection.
    """

    provider: ClassVar[str]
    default_timeout: ClassVar[float] = 30.0

    def __init__(self, *, model: str, connection: ConnectionSettings) -> None:
        self.model = model
        self.name = f"{self.provider}:{model}"
        timeout = self.default_timeout if connection.timeout is None else connection.timeout
        self._connection = self._connect(connection, timeout=timeout)

    def _connect(self, settings: ConnectionSettings, *, timeout: float) -> C:
        raise NotImplementedError


# --- chat ---------------------------------------------------------------------------------------


def message_dicts(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def relay_deltas(
    parts: Iterator[tuple[str, bool]], *, close: Callable[[], None], provider: str
) -> Iterator[str]:
    """Yield the text of a chat stream given as (delta, finished) parts, one per chunk.

    A stream that ends without any chunk carrying a finish reason is a bad response (the answer
    was cut off). Errors are not retried once deltas flow: a RetryableError raised by `parts`
    surfaces as its port error. `close` (the HTTP response) runs however the iteration ends,
    including when the caller closes this iterator early.
    """
    try:
        finished = False
        for delta, done in parts:
            finished = finished or done
            if delta:
                yield delta
        if not finished:
            raise ProviderBadResponse(f"{provider} chat: stream ended before the answer did")
    except RetryableError as exc:
        raise exc.error from None
    finally:
        close()


async def arelay_deltas(
    parts: AsyncIterator[tuple[str, bool]], *, close: Callable[[], Awaitable[None]], provider: str
) -> AsyncIterator[str]:
    """`relay_deltas` for a stream read on the event loop: the same rules, `close` awaited."""
    try:
        finished = False
        async for delta, done in parts:
            finished = finished or done
            if delta:
                yield delta
        if not finished:
            raise ProviderBadResponse(f"{provider} chat: stream ended before the answer did")
    except RetryableError as exc:
        raise exc.error from None
    finally:
        await close()


# --- embeddings ---------------------------------------------------------------------------------

# Empty strings are rejected by both APIs; a fixed placeholder keeps batches valid and gives all
# empty texts one shared, stable vector.
EMPTY_TEXT_PLACEHOLDER = "（空）"


def prepare_embedding_inputs(
    texts: Sequence[str], *, max_tokens_per_text: int, provider: str
) -> list[str]:
    """Texts as they will be sent; refuses (before sending anything) texts over the limit.

    Refusing instead of truncating keeps the index honest: a vector always stands for the whole
    text it is stored with. Chunking keeps chunks far below the limits.
    """
    prepared: list[str] = []
    for position, text in enumerate(texts):
        if not text or not text.strip():
            prepared.append(EMPTY_TEXT_PLACEHOLDER)
            continue
        # Cheap bound first: a Qwen token is never shorter than one character.
        if len(text) > max_tokens_per_text:
            tokens = count_tokens(text)
            if tokens > max_tokens_per_text:
                raise ProviderInputTooLarge(
                    f"{provider} embedding: text #{position} has {tokens} tokens, "
                    f"limit {max_tokens_per_text}"
                )
        prepared.append(text)
    return prepared


def batches(items: Sequence[T], size: int) -> Iterable[tuple[int, Sequence[T]]]:
    for start in range(0, len(items), size):
        yield start, items[start : start + size]


def validated_vectors(
    indexed: Iterable[tuple[object, object]], *, expected: int, dimension: int, provider: str
) -> list[list[float]]:
    """Vectors ordered by their index, checked for count, index set, dimension and finiteness,
    then L2-normalised (the port promises unit vectors whatever the provider returns)."""
    by_index: dict[int, list[float]] = {}
    for index, vector in indexed:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < expected:
            raise ProviderBadResponse(f"{provider} embedding: index out of range")
        if index in by_index:
            raise ProviderBadResponse(f"{provider} embedding: duplicate index {index}")
        if not isinstance(vector, list | tuple) or len(vector) != dimension:
            got = len(vector) if isinstance(vector, list | tuple) else "no"
            raise ProviderBadResponse(
                f"{provider} embedding: expected dimension {dimension}, got {got}"
            )
        by_index[index] = _unit(vector, provider=provider)
    if len(by_index) != expected:
        raise ProviderBadResponse(
            f"{provider} embedding: expected {expected} vectors, got {len(by_index)}"
        )
    return [by_index[i] for i in range(expected)]


def _unit(vector: Sequence[object], *, provider: str) -> list[float]:
    values: list[float] = []
    for value in vector:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ProviderBadResponse(f"{provider} embedding: non-numeric component")
        values.append(float(value))
    norm = math.sqrt(math.fsum(v * v for v in values))
    if not math.isfinite(norm) or norm == 0.0:
        raise ProviderBadResponse(f"{provider} embedding: zero or non-finite vector")
    return [v / norm for v in values]


# --- rerank -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RerankLimits:
    """Documented request limits of a rerank model.

    `max_request_tokens` is checked with the provider's formula
    query_tokens × documents + document_tokens, counting documents in full (conservative: the
    provider may truncate long documents to `max_item_tokens`, we never rely on it).
    """

    max_documents: int
    max_item_tokens: int
    max_request_tokens: int


def rerank_prefix_length(
    query: str, documents: Sequence[str], *, limits: RerankLimits, provider: str
) -> int:
    """How many leading documents (already in fusion order) fit one rerank request."""
    query_tokens = count_tokens(query)
    if query_tokens > limits.max_item_tokens or query_tokens > limits.max_request_tokens:
        raise ProviderInputTooLarge(
            f"{provider} rerank: query has {query_tokens} tokens, limit {limits.max_item_tokens}"
        )
    used = 0
    kept = 0
    for document in documents[: limits.max_documents]:
        cost = query_tokens + count_tokens(document)
        if used + cost > limits.max_request_tokens:
            break
        used += cost
        kept += 1
    if kept == 0:
        raise ProviderInputTooLarge(
            f"{provider} rerank: not even one document fits {limits.max_request_tokens} tokens"
        )
    return kept


def validated_rerank(results: object, *, sent: int, top_n: int, provider: str) -> list[RerankScore]:
    """Scores best first, from `[{"index": int, "relevance_score": float}, ...]`."""
    if not isinstance(results, list) or not results:
        raise ProviderBadResponse(f"{provider} rerank: empty results")
    seen: set[int] = set()
    scores: list[RerankScore] = []
    for item in results:
        if not isinstance(item, dict):
            raise ProviderBadResponse(f"{provider} rerank: malformed result")
        index = item.get("index")
        score = item.get("relevance_score")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < sent:
            raise ProviderBadResponse(f"{provider} rerank: index out of range")
        if index in seen:
            raise ProviderBadResponse(f"{provider} rerank: duplicate index {index}")
        if (
            not isinstance(score, int | float)
            or isinstance(score, bool)
            or not math.isfinite(score)
        ):
            raise ProviderBadResponse(f"{provider} rerank: missing or non-finite score")
        seen.add(index)
        scores.append(RerankScore(index=index, score=float(score)))
    # Stable on ties by index: equal scores keep the fusion order.
    scores.sort(key=lambda s: (-s.score, s.index))
    return scores[:top_n]


# --- rewrite ------------------------------------------------------------------------------------

REWRITE_SYSTEM_PROMPT = (
    "你是企业知识库检索系统的查询改写助手。请把用户的问题改写成一个更适合在知识库中检索的完整问句："
    "补全省略的主语或对象，把口语说法换成规范说法。\n"
    "要求：\n"
    "1. 必须原样保留问题中的产品名、型号、编号、数字、日期、英文缩写和其他专有名词；\n"
    "2. 不得添加原问题中没有的事实、条件或假设，不要回答问题；\n"
    "3. 只给出一个改写结果，长度与原问题相近；\n"
    '4. 只输出一个 JSON 对象，格式为 {"rewrite": "改写后的问题"}，不要输出任何其他内容。'
)


def rewrite_user_prompt(question: str) -> str:
    return f"原问题：{question}"


def rewrite_messages(
    question: str, *, max_question_tokens: int, provider: str
) -> list[dict[str, str]] | None:
    """The chat messages asking for a rewrite of `question`; None for a blank question (nothing
    to rewrite). A question over `max_question_tokens` is refused before anything is sent."""
    if not question.strip():
        return None
    if count_tokens(question) > max_question_tokens:
        raise ProviderInputTooLarge(f"{provider} rewrite: question too long")
    return [
        {"role": "system", "content": REWRITE_SYSTEM_PROMPT},
        {"role": "user", "content": rewrite_user_prompt(question)},
    ]


_NORMALISE_DROP = re.compile(r"[\s\W_]+", re.UNICODE)
_NUMBERS = re.compile(r"\d+(?:\.\d+)?")
_LATIN_TERMS = re.compile(r"[A-Za-z][A-Za-z0-9\-]+")


def normalise_for_comparison(text: str) -> str:
    return _NORMALISE_DROP.sub("", unicodedata.normalize("NFKC", text).casefold())


def parse_rewrite(raw: str | None, *, original: str, provider: str) -> str:
    """The validated rewrite from the model's JSON answer, or ProviderBadResponse."""
    if not raw or not raw.strip():
        raise ProviderBadResponse(f"{provider} rewrite: empty answer")
    text = raw.strip()
    # Some servers wrap JSON mode output in a Markdown fence anyway.
    if text.startswith("```"):
        text = re.sub(r"^```(?:json)?\s*|\s*```$", "", text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ProviderBadResponse(f"{provider} rewrite: answer is not JSON") from None
    if not isinstance(data, dict):
        raise ProviderBadResponse(f"{provider} rewrite: answer is not a JSON object")
    rewrite = data.get("rewrite")
    if not isinstance(rewrite, str) or not rewrite.strip():
        raise ProviderBadResponse(f"{provider} rewrite: no non-empty 'rewrite' string")
    rewrite = " ".join(rewrite.split())
    if len(rewrite) > 3 * len(original) + 50:
        raise ProviderBadResponse(f"{provider} rewrite: answer too long")
    if normalise_for_comparison(rewrite) == normalise_for_comparison(original):
        raise ProviderBadResponse(f"{provider} rewrite: identical to the question")
    # Numbers and Latin product names are exactly what a rewrite must not lose or alter.
    folded = unicodedata.normalize("NFKC", rewrite).casefold()
    source = unicodedata.normalize("NFKC", original)
    for term in (*_NUMBERS.findall(source), *_LATIN_TERMS.findall(source)):
        if term.casefold() not in folded:
            raise ProviderBadResponse(f"{provider} rewrite: dropped a number or product name")
    return rewrite


# --- captions -----------------------------------------------------------------------------------

CAPTION_PROMPT = (
    "请用中文简要描述这张图片的内容，用于企业知识库检索和引用：说明图片类型（如流程图、表格、截图、"
    "照片）、主要对象和关键信息，如有文字请保留其中的关键文字和数字。不超过150字，只输出描述本身。"
)

# Base64 grows data by 4/3; providers cap inline images at about 10 MB of encoded data.
MAX_INLINE_IMAGE_BYTES = 7 * 1024 * 1024


def caption_prompt(*, context: str, ocr_text: str) -> str:
    parts = [CAPTION_PROMPT]
    if ocr_text.strip():
        parts.append(f"图片中识别出的文字（可能有误）：{ocr_text.strip()[:1000]}")
    if context.strip():
        parts.append(f"图片所在位置的上下文：{context.strip()[:1000]}")
    return "\n".join(parts)


def jpeg_data_uri(image_jpeg: bytes, *, provider: str) -> str:
    if not image_jpeg:
        raise ValueError("image_jpeg is empty")
    if len(image_jpeg) > MAX_INLINE_IMAGE_BYTES:
        raise ProviderInputTooLarge(
            f"{provider} caption: image has {len(image_jpeg)} bytes, limit {MAX_INLINE_IMAGE_BYTES}"
        )
    return "data:image/jpeg;base64," + base64.b64encode(image_jpeg).decode("ascii")


def finish_caption(text: str | None, *, provider: str) -> str:
    caption = " ".join((text or "").split())
    if not caption:
        raise ProviderBadResponse(f"{provider} caption: empty answer")
    return caption if caption.startswith("图片") else f"图片：{caption}"
