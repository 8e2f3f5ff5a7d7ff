"""Any OpenAI-compatible server (vLLM, Ollama, Xinference, …) through the `openai` package.

The client is created with `max_retries=0`: the SDK would also retry 408/409 and connection
failures, with delays that cannot be shortened. Retries follow the shared policy instead
(`_common.RetryPolicy`): 429 and 5xx only, exponential backoff with jitter, the same as the
DashScope adapters. Timeouts are the client's `timeout` option.

Token counts use the Qwen tokenizer (`engines.tokens`); for servers running other model
families they are an approximation, so keep the limits below with some headroom.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import openai

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

PROVIDER = "openai"
T = TypeVar("T")

# Self-hosted rerankers (bge-reranker, qwen3-reranker on vLLM/Xinference) document no request
# budget of their own; these keep a request in the same range as qwen3-rerank.
DEFAULT_RERANK_LIMITS = RerankLimits(
    max_documents=100, max_item_tokens=4000, max_request_tokens=120_000
)


class _Connection:
    """An SDK client for one adapter's settings, plus the shared retry policy."""

    def __init__(self, settings: ConnectionSettings, *, timeout: float) -> None:
        if not settings.base_url:
            raise ValueError("base_url is required")
        self.timeout = timeout
        self.retry = settings.retry
        # Servers without authentication still need some bearer value for the SDK.
        self._client_options = {
            "api_key": settings.api_key or "EMPTY",
            "base_url": settings.base_url.rstrip("/"),
            "timeout": timeout,
            "max_retries": 0,
        }
        self.client = openai.OpenAI(**self._client_options)
        # An async client's connections belong to the event loop that opened them: one client
        # per loop (a server has one; tests start several), dropped with its loop.
        self._async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )
        self._async_lock = threading.Lock()

    def async_client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        with self._async_lock:
            client = self._async_clients.get(loop)
            if client is None:
                client = self._async_clients[loop] = openai.AsyncOpenAI(**self._client_options)
            return client

    def __repr__(self) -> str:  # never show the key
        return f"<openai-compatible connection {self.client.base_url} timeout={self.timeout}>"

    def call(self, request: Callable[[], T], *, what: str) -> T:
        def attempt() -> T:
            with self.errors(what):
                return request()

        return call_with_retries(attempt, self.retry, what=f"{PROVIDER} {what}")

    async def acall(self, request: Callable[[], Awaitable[T]], *, what: str) -> T:
        async def attempt() -> T:
            with self.errors(what):
                return await request()

        return await acall_with_retries(attempt, self.retry, what=f"{PROVIDER} {what}")

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """Map the SDK's exceptions to port errors; 429/5xx come wrapped in RetryableError.

        Status errors are raised `from None`: their message carries the provider's body.
        """
        try:
            yield
        except openai.APITimeoutError as exc:
            raise ProviderTimeout(f"{PROVIDER} {what}: no answer within {self.timeout}s") from exc
        except openai.APIConnectionError as exc:
            raise ProviderUnavailable(f"{PROVIDER} {what}: connection failed") from exc
        except openai.APIStatusError as exc:
            code = exc.code if isinstance(exc.code, str) else None
            error = status_error(provider=PROVIDER, what=what, status=exc.status_code, code=code)
            if is_retryable_status(exc.status_code):
                raise RetryableError(error) from None
            raise error from None
        except openai.APIResponseValidationError:
            raise ProviderBadResponse(f"{PROVIDER} {what}: malformed response") from None
        except openai.APIError:
            # An error event inside a stream that had already started.
            raise ProviderUnavailable(f"{PROVIDER} {what}: error reported mid-stream") from None
        except (ValueError, TypeError, AttributeError, KeyError):
            # Malformed JSON (json.JSONDecodeError is a ValueError) or a body of the wrong shape.
            raise ProviderBadResponse(f"{PROVIDER} {what}: malformed response") from None


def _get(value: Any, *path: str | int) -> Any:
    """Walk SDK models (built without validation) or plain dicts; None when anything is absent."""
    for key in path:
        if value is None:
            return None
        if isinstance(key, int):
            if not isinstance(value, list) or len(value) <= key:
                return None
            value = value[key]
        elif isinstance(value, dict):
            value = value.get(key)
        else:
            value = getattr(value, key, None)
    return value


def _completion_text(completion: Any, *, what: str) -> str:
    content = _get(completion, "choices", 0, "message", "content")
    if not isinstance(content, str):
        raise ProviderBadResponse(f"{PROVIDER} {what}: answer has no text")
    return content


class _Adapter(RemoteAdapter[_Connection]):
    provider = PROVIDER

    def _connect(self, settings: ConnectionSettings, *, timeout: float) -> _Connection:
        return _Connection(settings, timeout=timeout)


# --- embeddings ---------------------------------------------------------------------------------


class OpenAIEmbedder(_Adapter):
    """/embeddings in batches. `dimensions` is sent only with `send_dimensions=True` (models
    with adjustable output size); the returned size is always checked against `dimension`.
    Over-long texts are refused with ProviderInputTooLarge, never truncated."""

    semantic = True
    similarity_range = None  # uncalibrated: relevance is lexical only
    uses_all_cores = False

    def __init__(
        self,
        *,
        model: str,
        dimension: int,
        connection: ConnectionSettings,
        batch_size: int = 32,
        max_tokens_per_text: int = 8192,
        send_dimensions: bool = False,
    ) -> None:
        super().__init__(model=model, connection=connection)
        self.dimension = dimension
        self.batch_size = batch_size
        self.max_tokens_per_text = max_tokens_per_text
        self.send_dimensions = send_dimensions

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        prepared = prepare_embedding_inputs(
            texts, max_tokens_per_text=self.max_tokens_per_text, provider=PROVIDER
        )
        client = self._connection.client
        extra: dict[str, Any] = {"dimensions": self.dimension} if self.send_dimensions else {}
        vectors: list[list[float]] = []
        for _, batch in batches(prepared, self.batch_size):
            response = self._connection.call(
                lambda batch=batch: client.embeddings.create(
                    model=self.model, input=list(batch), encoding_format="float", **extra
                ),
                what="embedding",
            )
            data = _get(response, "data")
            if not isinstance(data, list):
                raise ProviderBadResponse(f"{PROVIDER} embedding: no data in answer")
            vectors.extend(
                validated_vectors(
                    ((_get(item, "index"), _get(item, "embedding")) for item in data),
                    expected=len(batch),
                    dimension=self.dimension,
                    provider=PROVIDER,
                )
            )
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


# --- rerank -------------------------------------------------------------------------------------


class OpenAIReranker(_Adapter):
    """POST {base_url}/rerank in the Jina/vLLM/Xinference format:
    {"model", "query", "documents", "top_n"} → {"results": [{"index", "relevance_score"}]}.

    Same budget and validation as the DashScope reranker: the longest fitting prefix of the
    fusion-ordered documents is sent in one request; a query over the per-item limit is refused.
    """

    def __init__(
        self,
        *,
        model: str,
        connection: ConnectionSettings,
        limits: RerankLimits = DEFAULT_RERANK_LIMITS,
        path: str = "/rerank",
    ) -> None:
        super().__init__(model=model, connection=connection)
        self.limits = limits
        self.path = path

    def rerank(self, query: str, documents: Sequence[str], *, top_n: int) -> list[RerankScore]:
        if top_n <= 0 or not documents:
            return []
        kept = rerank_prefix_length(query, documents, limits=self.limits, provider=PROVIDER)
        client = self._connection.client
        body = {
            "model": self.model,
            "query": query,
            "documents": list(documents[:kept]),
            "top_n": min(top_n, kept),
        }
        response = self._connection.call(
            lambda: client.post(self.path, cast_to=object, body=body), what="rerank"
        )
        if not isinstance(response, dict):
            raise ProviderBadResponse(f"{PROVIDER} rerank: answer is not a JSON object")
        return validated_rerank(response.get("results"), sent=kept, top_n=top_n, provider=PROVIDER)


# --- rewrite ------------------------------------------------------------------------------------


class OpenAIRewriter(_Adapter):
    """chat.completions in JSON mode: {"rewrite": "..."}, validated (see `parse_rewrite`)."""

    def __init__(
        self,
        *,
        model: str,
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
        client = self._connection.client
        completion = self._connection.call(
            lambda: client.chat.completions.create(
                model=self.model,
                messages=messages,
                response_format={"type": "json_object"},
                temperature=0.1,
                max_tokens=256,
            ),
            what="rewrite",
        )
        return parse_rewrite(
            _completion_text(completion, what="rewrite"), original=question, provider=PROVIDER
        )


# --- chat ---------------------------------------------------------------------------------------


class OpenAIChatModel(_Adapter):
    """Streaming chat.completions (`_stream_body`); deltas are yielded as they arrive. Nothing is sent before the
    first `next()`; closing the iterator closes the HTTP response. Only opening the stream is
    retried. `astream` is the same call through the SDK's async client, on the event loop."""

    generative = True
    default_timeout = 60.0

    def stream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024, temperature: float = 0.2
    ) -> Iterator[str]:
        return self._stream(message_dicts(messages), max_tokens=max_tokens, temperature=temperature)

    def complete(
        self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024, temperature: float = 0.2
    ) -> str:
        client = self._connection.client
        completion = self._connection.call(
            lambda: client.chat.completions.create(
                model=self.model,
                messages=message_dicts(messages),
                max_tokens=max_tokens,
                temperature=temperature,
            ),
            what="chat",
        )
        return _completion_text(completion, what="chat")

    def _stream(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float
    ) -> Iterator[str]:
        client = self._connection.client
        # create() returns once the status line and headers are in: 429/5xx surface here.
        body = _stream_body(self.model, messages, max_tokens=max_tokens, temperature=temperature)
        stream = self._connection.call(
            lambda: client.post("/chat/completions", body=body, cast_to=object, stream=True,
                                stream_cls=openai.Stream[object]),
            what="chat",
        )
        yield from relay_deltas(self._parts(stream), close=stream.close, provider=PROVIDER)

    def _parts(self, stream: Any) -> Iterator[tuple[str, bool]]:
        """(delta, finished) per chunk; chunks without choices (final usage) are skipped."""
        chunks = iter(stream)
        while True:
            with self._connection.errors("chat"):
                chunk = next(chunks, None)
            if chunk is None:
                return
            part = _chunk_part(chunk)
            if part is not None:
                yield part

    async def astream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024, temperature: float = 0.2
    ) -> AsyncIterator[str]:
        client = self._connection.async_client()
        body = _stream_body(self.model, message_dicts(messages), max_tokens=max_tokens, temperature=temperature)
        stream = await self._connection.acall(
            lambda: client.post("/chat/completions", body=body, cast_to=object, stream=True,
                                stream_cls=openai.AsyncStream[object]),
            what="chat",
        )
        relay = arelay_deltas(self._aparts(stream), close=stream.close, provider=PROVIDER)
        try:
            async for delta in relay:
                yield delta
        finally:
            await relay.aclose()

    async def _aparts(self, stream: Any) -> AsyncIterator[tuple[str, bool]]:
        chunks = stream.__aiter__()
        while True:
            with self._connection.errors("chat"):
                chunk = await anext(chunks, None)
            if chunk is None:
                return
            part = _chunk_part(chunk)
            if part is not None:
                yield part


def _stream_body(model: str, messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> dict:
    """A streamed chat.completions request. Sent with the SDK's own `post` (its transport,
    authentication, SSE decoding and error events) and chunks kept as the JSON they are: building
    the SDK's typed chunk for each token cost 0.1–0.3 ms (profiled), the largest cost of a turn
    on the server, as much as everything else it does for a 150-token answer."""
    return {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature,
            "stream": True}


def _chunk_part(chunk: Any) -> tuple[str, bool] | None:
    """A stream chunk's (delta, finished); None for a chunk without choices (final usage)."""
    choices = _get(chunk, "choices")
    if not isinstance(choices, list):
        raise ProviderBadResponse(f"{PROVIDER} chat: chunk without choices")
    if not choices:
        return None
    delta = _get(choices, 0, "delta", "content")
    if delta is not None and not isinstance(delta, str):
        raise ProviderBadResponse(f"{PROVIDER} chat: chunk content is not text")
    return delta or "", bool(_get(choices, 0, "finish_reason"))


# --- captions -----------------------------------------------------------------------------------


class OpenAICaptioner(_Adapter):
    """chat.completions with the image as an `image_url` data URI (vision models on vLLM,
    Ollama, …)."""

    default_timeout = 60.0

    def caption(self, *, image_jpeg: bytes, context: str, ocr_text: str = "") -> str:
        image = jpeg_data_uri(image_jpeg, provider=PROVIDER)
        client = self._connection.client
        completion = self._connection.call(
            lambda: client.chat.completions.create(
                model=self.model,
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": image}},
                            {
                                "type": "text",
                                "text": caption_prompt(context=context, ocr_text=ocr_text),
                            },
                        ],
                    }
                ],
                max_tokens=300,
            ),
            what="caption",
        )
        return finish_caption(_completion_text(completion, what="caption"), provider=PROVIDER)
