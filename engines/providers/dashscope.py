"""Alibaba Cloud Model Studio (Bailian) through the official `dashscope` SDK.

Every call passes `api_key`, `base_address` and `request_timeout` explicitly, so the SDK's
process-wide globals (`dashscope.api_key`, `dashscope.base_http_api_url`) are never read or
written, and adapters with different keys or endpoints can live in one process.

Limits used (from the Model Studio documentation, checked 2026): text-embedding-v3/v4 take at
most 10 texts per call and 8,192 tokens per text (v1/v2: 25 and 2,048); qwen3-rerank takes at
most 500 documents, 4,000 tokens per query or document and 120,000 tokens per request counted
as query_tokens × documents + document_tokens (gte-rerank-v2: 30,000). Tokens are counted with
the Qwen tokenizer the SDK ships (`engines.tokens`).

A chat answer also streams on the event loop (`astream`, the SDK's `AioGeneration`, aiohttp):
the same request, retries and checks, with aiohttp's failures mapped like `requests`' ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import aiohttp
import requests
import urllib3.exceptions
from dashscope import AioGeneration, Generation, MultiModalConversation, TextEmbedding, TextReRank
from dashscope.common.error import DashScopeException

from engines.ports import (
    ChatMessage,
    ProviderBadResponse,
    ProviderTimeout,
    ProviderUnavailable,
    RerankScore,
)
from engines.providers._common import (
    ConnectionSettings,
    RemoteAdapter,
    RerankLimits,
    RetryableError,
    acall_with_retries,
    arelay_deltas,
    batches,
    call_with_retries,
    caption_prompt,
    finish_caption,
    is_retryable_status,
    jpeg_data_uri,
    message_dicts,
    parse_rewrite,
    prepare_embedding_inputs,
    relay_deltas,
    rerank_prefix_length,
    rewrite_messages,
    status_error,
    validated_rerank,
    validated_vectors,
)

DEFAULT_BASE_URL = "https://dashscope.aliyuncs.com/api/v1"
PROVIDER = "dashscope"

# model -> (texts per call, tokens per text)
_EMBEDDING_LIMITS = {
    "text-embedding-v4": (10, 8192),
    "text-embedding-v3": (10, 8192),
    "text-embedding-v2": (25, 2048),
    "text-embedding-v1": (25, 2048),
}
# Only v3/v4 accept `dimension` and `text_type`.
_FLEXIBLE_EMBEDDING_MODELS = frozenset({"text-embedding-v3", "text-embedding-v4"})

RERANK_LIMITS = {
    "qwen3-rerank": RerankLimits(
        max_documents=500, max_item_tokens=4000, max_request_tokens=120_000
    ),
    "gte-rerank-v2": RerankLimits(
        max_documents=500, max_item_tokens=4000, max_request_tokens=30_000
    ),
}
# For a model not in the table: the strictest documented limits.
_FALLBACK_RERANK_LIMITS = RerankLimits(
    max_documents=100, max_item_tokens=4000, max_request_tokens=30_000
)

_END = object()


class _Connection:
    """Key, endpoint, timeout and retry policy of one adapter, applied to every SDK call.
    Without a `base_url` the settings mean the public Model Studio endpoint."""

    def __init__(self, settings: ConnectionSettings, *, timeout: float) -> None:
        if not settings.api_key:
            raise ValueError("api_key is required")
        self._api_key = settings.api_key
        self.base_url = (settings.base_url or DEFAULT_BASE_URL).rstrip("/")
        self.timeout = timeout
        self.retry = settings.retry

    def __repr__(self) -> str:  # never show the key
        return f"<dashscope connection {self.base_url} timeout={self.timeout}>"

    def sdk_args(self) -> dict[str, Any]:
        return {
            "api_key": self._api_key,
            "base_address": self.base_url,
            "request_timeout": self.timeout,
        }

    def call(self, sdk_call: Callable[..., Any], *, what: str, **kwargs: Any) -> Any:
        """One non-streaming SDK call with retries; returns the successful SDK response."""

        def attempt() -> Any:
            with self.transport_errors(what):
                response = sdk_call(**self.sdk_args(), **kwargs)
            self.check(response, what=what)
            return response

        return call_with_retries(attempt, self.retry, what=f"{PROVIDER} {what}")

    def check(self, response: Any, *, what: str) -> None:
        """Raise the port error for a non-200 SDK response (wrapped if worth retrying)."""
        status = int(getattr(response, "status_code", 0) or 0)
        if status == 200:
            return
        if status == 0:
            raise ProviderBadResponse(f"{PROVIDER} {what}: response without status")
        error = status_error(
            provider=PROVIDER, what=what, status=status, code=getattr(response, "code", None)
        )
        if is_retryable_status(status):
            raise RetryableError(error)
        raise error

    @contextmanager
    def transport_errors(self, what: str) -> Iterator[None]:
        """Map what the SDK and `requests` raise to port errors.

        The SDK turns HTTP error statuses into responses, but lets transport failures through
        as `requests` exceptions, and fails with TypeError/KeyError/AttributeError while building
        its typed responses from a body of the wrong shape. Only the SDK call (or one `next()`
        on its stream) runs inside this block.
        """
        with self._sdk_errors(what):
            try:
                yield
            except requests.exceptions.Timeout as exc:
                raise ProviderTimeout(f"{PROVIDER} {what}: no answer within {self.timeout}s") from exc
            except requests.exceptions.JSONDecodeError:
                raise ProviderBadResponse(f"{PROVIDER} {what}: malformed JSON") from None
            except requests.exceptions.ConnectionError as exc:
                # While streaming, requests reports a read timeout as a ConnectionError.
                if exc.args and isinstance(exc.args[0], urllib3.exceptions.ReadTimeoutError):
                    raise ProviderTimeout(f"{PROVIDER} {what}: no data within {self.timeout}s") from exc
                raise ProviderUnavailable(f"{PROVIDER} {what}: connection failed") from exc
            except requests.exceptions.RequestException as exc:
                raise ProviderUnavailable(
                    f"{PROVIDER} {what}: transport error ({type(exc).__name__})"
                ) from exc

    @contextmanager
    def aio_transport_errors(self, what: str) -> Iterator[None]:
        """`transport_errors` for the SDK's aiohttp transport (`astream`)."""
        with self._sdk_errors(what):
            try:
                yield
            except asyncio.TimeoutError as exc:  # aiohttp's read timeouts are TimeoutErrors too
                raise ProviderTimeout(f"{PROVIDER} {what}: no data within {self.timeout}s") from exc
            except aiohttp.ContentTypeError:
                raise ProviderBadResponse(f"{PROVIDER} {what}: malformed response") from None
            except aiohttp.ClientError as exc:
                raise ProviderUnavailable(
                    f"{PROVIDER} {what}: transport error ({type(exc).__name__})"
                ) from exc

    @staticmethod
    @contextmanager
    def _sdk_errors(what: str) -> Iterator[None]:
        """What the SDK itself raises, whichever transport carried the call."""
        try:
            yield
        except (TypeError, KeyError, AttributeError, ValueError):
            raise ProviderBadResponse(f"{PROVIDER} {what}: malformed response") from None
        except DashScopeException as exc:
            raise ProviderUnavailable(
                f"{PROVIDER} {what}: SDK refused the request ({type(exc).__name__})"
            ) from None


def _dig(value: Any, *path: str | int) -> Any:
    for key in path:
        if isinstance(key, int):
            if not isinstance(value, list) or len(value) <= key:
                return None
            value = value[key]
        else:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
    return value


def _message_text(response: Any, *, what: str) -> str:
    content = _dig(response, "output", "choices", 0, "message", "content")
    if content is None:
        # result_format="text" style answers, accepted for robustness
        content = _dig(response, "output", "text")
    if isinstance(content, list):  # multimodal answers: [{"text": ...}, ...]
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    if not isinstance(content, str):
        raise ProviderBadResponse(f"{PROVIDER} {what}: answer has no text")
    return content


def _stream_delta(response: Any) -> str:
    """The text of one incremental chunk; chunks carrying only reasoning or a finish reason
    have none."""
    choices = _dig(response, "output", "choices")
    if not isinstance(choices, list) or not choices:
        raise ProviderBadResponse(f"{PROVIDER} chat: chunk without choices")
    content = _dig(choices, 0, "message", "content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    if content is None:
        return ""
    if not isinstance(content, str):
        raise ProviderBadResponse(f"{PROVIDER} chat: chunk content is not text")
    return content


class _Adapter(RemoteAdapter[_Connection]):
    provider = PROVIDER

    def _connect(self, settings: ConnectionSettings, *, timeout: float) -> _Connection:
        return _Connection(settings, timeout=timeout)


# --- embeddings ---------------------------------------------------------------------------------


class DashScopeEmbedder(_Adapter):
    """`TextEmbedding.call` in batches within the model's documented limits.

    Texts over the per-text token limit are refused with ProviderInputTooLarge before anything
    is sent (never truncated: a stored vector must stand for its whole chunk). Empty texts are
    embedded as a fixed placeholder. Documents and queries are embedded with `text_type`
    "document" / "query" (asymmetric retrieval, v3/v4).
    """

    semantic = True
    similarity_range = None  # uncalibrated: relevance is lexical only
    uses_all_cores = False

    def __init__(
        self,
        *,
        model: str = "text-embedding-v4",
        dimension: int = 1024,
        connection: ConnectionSettings,
        batch_size: int | None = None,
        max_tokens_per_text: int | None = None,
    ) -> None:
        super().__init__(model=model, connection=connection)
        limit_batch, limit_tokens = _EMBEDDING_LIMITS.get(model, (10, 8192))
        self.dimension = dimension
        self.batch_size = min(batch_size or limit_batch, limit_batch)
        self.max_tokens_per_text = min(max_tokens_per_text or limit_tokens, limit_tokens)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed(texts, text_type="document")

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text], text_type="query")[0]

    def _embed(self, texts: Sequence[str], *, text_type: str) -> list[list[float]]:
        prepared = prepare_embedding_inputs(
            texts, max_tokens_per_text=self.max_tokens_per_text, provider=PROVIDER
        )
        extra: dict[str, Any] = {}
        if self.model in _FLEXIBLE_EMBEDDING_MODELS:
            extra = {"dimension": self.dimension, "text_type": text_type}
        vectors: list[list[float]] = []
        for _, batch in batches(prepared, self.batch_size):
            response = self._connection.call(
                TextEmbedding.call, what="embedding", model=self.model, input=list(batch), **extra
            )
            embeddings = _dig(response, "output", "embeddings")
            if not isinstance(embeddings, list):
                raise ProviderBadResponse(f"{PROVIDER} embedding: no embeddings in answer")
            vectors.extend(
                validated_vectors(
                    ((_dig(item, "text_index"), _dig(item, "embedding")) for item in embeddings),
                    expected=len(batch),
                    dimension=self.dimension,
                    provider=PROVIDER,
                )
            )
        return vectors


# --- rerank -------------------------------------------------------------------------------------


class DashScopeReranker(_Adapter):
    """`TextReRank.call`: one request with the longest prefix of the (fusion-ordered) documents
    that fits the model's limits; documents past the prefix get no score.

    A query over the per-item limit is refused (ProviderInputTooLarge), never truncated.
    Responses with out-of-range or duplicate indexes, or no results, are ProviderBadResponse.
    """

    def __init__(
        self,
        *,
        model: str = "qwen3-rerank",
        connection: ConnectionSettings,
        limits: RerankLimits | None = None,
    ) -> None:
        super().__init__(model=model, connection=connection)
        self.limits = limits or RERANK_LIMITS.get(model, _FALLBACK_RERANK_LIMITS)

    def rerank(self, query: str, documents: Sequence[str], *, top_n: int) -> list[RerankScore]:
        if top_n <= 0 or not documents:
            return []
        kept = rerank_prefix_length(query, documents, limits=self.limits, provider=PROVIDER)
        response = self._connection.call(
            TextReRank.call,
            what="rerank",
            model=self.model,
            query=query,
            documents=list(documents[:kept]),
            top_n=min(top_n, kept),
            return_documents=False,
        )
        return validated_rerank(
            _dig(response, "output", "results"), sent=kept, top_n=top_n, provider=PROVIDER
        )


# --- rewrite ------------------------------------------------------------------------------------


class DashScopeRewriter(_Adapter):
    """`Generation.call` in JSON mode: {"rewrite": "..."}, validated (see `parse_rewrite`)."""

    def __init__(
        self,
        *,
        model: str = "qwen-plus",
        connection: ConnectionSettings,
        max_question_tokens: int = 1000,
    ) -> None:
        super().__init__(model=model, connection=connection)
        self.max_question_tokens = max_question_tokens

    def rewrite(self, question: str) -> str | None:
        messages = rewrite_messages(
            question, max_question_tokens=self.max_question_tokens, provider=PROVIDER
        )
        if messages is None:
            return None
        response = self._connection.call(
            Generation.call,
            what="rewrite",
            model=self.model,
            messages=messages,
            result_format="message",
            response_format={"type": "json_object"},
            temperature=0.1,
            max_tokens=256,
        )
        return parse_rewrite(
            _message_text(response, what="rewrite"), original=question, provider=PROVIDER
        )


# --- chat ---------------------------------------------------------------------------------------


class DashScopeChatModel(_Adapter):
    """`Generation.call` with stream=True and incremental_output=True; deltas are yielded as
    they arrive. Nothing is sent before the first `next()`; closing the iterator closes the
    HTTP response. Only the opening of a stream is retried (429/5xx before the first delta).
    """

    generative = True
    default_timeout = 60.0

    def __init__(self, *, model: str = "qwen-plus", connection: ConnectionSettings) -> None:
        super().__init__(model=model, connection=connection)

    def stream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024, temperature: float = 0.2
    ) -> Iterator[str]:
        return self._stream(message_dicts(messages), max_tokens=max_tokens, temperature=temperature)

    def complete(
        self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024, temperature: float = 0.2
    ) -> str:
        response = self._connection.call(
            Generation.call,
            what="chat",
            model=self.model,
            messages=message_dicts(messages),
            result_format="message",
            max_tokens=max_tokens,
            temperature=temperature,
        )
        return _message_text(response, what="chat")

    def _stream(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float
    ) -> Iterator[str]:
        first, responses = call_with_retries(
            lambda: self._open(messages, max_tokens=max_tokens, temperature=temperature),
            self._connection.retry,
            what=f"{PROVIDER} chat",
        )
        yield from relay_deltas(
            self._parts(first, responses), close=responses.close, provider=PROVIDER
        )

    def _parts(self, first: Any, responses: Any) -> Iterator[tuple[str, bool]]:
        """(delta, finished) per response, starting with the one `_open` already read."""
        response = first
        while response is not _END:
            # Errors after the first delta are not retried: the caller already shows text.
            yield self._part(response)
            with self._connection.transport_errors("chat"):
                response = next(responses, _END)

    async def astream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024, temperature: float = 0.2
    ) -> AsyncIterator[str]:
        prepared = message_dicts(messages)
        first, responses = await acall_with_retries(
            lambda: self._aopen(prepared, max_tokens=max_tokens, temperature=temperature),
            self._connection.retry,
            what=f"{PROVIDER} chat",
        )
        relay = arelay_deltas(
            self._aparts(first, responses), close=responses.aclose, provider=PROVIDER
        )
        try:
            async for delta in relay:
                yield delta
        finally:
            await relay.aclose()

    async def _aparts(self, first: Any, responses: Any) -> AsyncIterator[tuple[str, bool]]:
        response = first
        while response is not _END:
            yield self._part(response)
            with self._connection.aio_transport_errors("chat"):
                response = await anext(responses, _END)

    def _part(self, response: Any) -> tuple[str, bool]:
        self._connection.check(response, what="chat")
        reason = _dig(response, "output", "choices", 0, "finish_reason")
        return _stream_delta(response), reason not in (None, "", "null")

    def _stream_args(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> dict:
        return {
            **self._connection.sdk_args(), "model": self.model, "messages": messages, "result_format": "message",
            "stream": True, "incremental_output": True, "max_tokens": max_tokens, "temperature": temperature,
        }

    def _check_first(self, first: Any) -> None:
        """The response that opened the stream: there is one, and it is not an error status."""
        if first is _END:
            raise ProviderBadResponse(f"{PROVIDER} chat: empty stream")
        self._connection.check(first, what="chat")

    def _open(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float
    ) -> tuple[Any, Any]:
        with self._connection.transport_errors("chat"):
            responses = Generation.call(**self._stream_args(messages, max_tokens=max_tokens, temperature=temperature))
            try:
                first = next(responses, _END)  # sends the request
            except BaseException:
                responses.close()
                raise
        try:
            self._check_first(first)
        except BaseException:
            responses.close()
            raise
        return first, responses

    async def _aopen(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float
    ) -> tuple[Any, Any]:
        with self._connection.aio_transport_errors("chat"):
            responses = await AioGeneration.call(
                **self._stream_args(messages, max_tokens=max_tokens, temperature=temperature))
            try:
                first = await anext(responses, _END)  # sends the request
            except BaseException:
                await responses.aclose()
                raise
        try:
            self._check_first(first)
        except BaseException:
            await responses.aclose()
            raise
        return first, responses


# --- captions -----------------------------------------------------------------------------------


class DashScopeCaptioner(_Adapter):
    """`MultiModalConversation.call` with the image inline as a base64 data URI (the SDK sends
    data URIs as they are; only local file paths would be uploaded to OSS)."""

    default_timeout = 60.0

    def __init__(self, *, model: str = "qwen-vl-plus", connection: ConnectionSettings) -> None:
        super().__init__(model=model, connection=connection)

    def caption(self, *, image_jpeg: bytes, context: str, ocr_text: str = "") -> str:
        image = jpeg_data_uri(image_jpeg, provider=PROVIDER)
        response = self._connection.call(
            MultiModalConversation.call,
            what="caption",
            model=self.model,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"image": image},
                        {"text": caption_prompt(context=context, ocr_text=ocr_text)},
                    ],
                }
            ],
            max_tokens=300,
        )
        return finish_caption(_message_text(response, what="caption"), provider=PROVIDER)
