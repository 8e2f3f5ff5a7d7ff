"""Model adapters, chosen by `settings.RAG_PROVIDER` ("local" | "dashscope" | "openai").

Settings read (all with `getattr` defaults; settings load them from the environment):
RAG_PROVIDER, RAG_EMBEDDING_MODEL, RAG_EMBEDDING_DIMENSION, DASHSCOPE_API_KEY, DASHSCOPE_BASE_URL,
OPENAI_BASE_URL, OPENAI_API_KEY, RAG_CHAT_MODEL, RAG_REWRITE_MODEL, RAG_RERANK_MODEL,
RAG_VISION_MODEL, RAG_PROVIDER_TIMEOUT_SECONDS, RAG_PROVIDER_MAX_RETRIES,
RAG_PROVIDER_RETRY_BASE_DELAY_SECONDS, RAG_OPENAI_EMBEDDING_SEND_DIMENSIONS.

A knowledge base keeps the embedding space it was built with: `get_embedder(model, dimension)`
with the KB's recorded values. The local models ("local-e5-small-v1", semantic, the default of
the local provider; "local-hash-lexical-v1", lexical) are served locally whatever the provider,
so knowledge bases built offline keep working after switching to a remote provider; a remote
model while RAG_PROVIDER is "local" is ImproperlyConfigured. RAG_LOCAL_EMBEDDING_THREADS and
RAG_LOCAL_EMBEDDING_BATCH_SIZE tune the e5 engine, RAG_LOCAL_EMBEDDING_TIMEOUT_SECONDS bounds one call to
it and RAG_LOCAL_EMBEDDING_ENGINE names the module its sandboxed child runs.

Adapters are cached per configuration (thread-safe); changing settings (e.g. in tests) yields
new instances, `clear_provider_cache()` drops them all.

The vector store is chosen the same way, by dotted path: RAG_VECTOR_STORE names the factory of
one store per embedding space and text analysis (default: Milvus, `engines.milvus_store`), which
caches its own clients per configuration.

So is web search: RAG_WEB_SEARCH_BACKEND names the adapter class (`engines.websearch.mcp.McpWebSearch`,
`engines.websearch.http.HttpWebSearch`, or a deployment's own taking `config=`); empty, the
deployment has no web search. It reads RAG_WEB_SEARCH_URL, RAG_WEB_SEARCH_API_KEY,
RAG_WEB_SEARCH_TIMEOUT_SECONDS, RAG_WEB_SEARCH_RESULTS, RAG_WEB_SEARCH_TOOL,
RAG_WEB_SEARCH_QUERY_ARGUMENT and RAG_WEB_SEARCH_COUNT_ARGUMENT.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from engines.ports import Captioner, ChatModel, Embedder, QueryRewriter, Reranker, VectorStore, WebSearch
from engines.providers._common import ConnectionSettings
from engines.providers.e5 import E5_EMBEDDING_MODEL, LocalE5Embedder
from engines.providers.e5 import ENGINE_MODULE as E5_ENGINE_MODULE
from engines.websearch import DEFAULT_RESULT_COUNT, DEFAULT_TIMEOUT_SECONDS, WebSearchConfig
from engines.providers.local import (
    LOCAL_EMBEDDING_MODEL,
    IdentityRewriter,
    LocalCaptioner,
    LocalHashingEmbedder,
    LocalLexicalReranker,
    OfflineChatModel,
)

PROVIDERS = ("local", "dashscope", "openai")

# Defaults for DashScope (Bailian); an OpenAI-compatible server has no sensible default models.
_DASHSCOPE_MODELS = {
    "RAG_CHAT_MODEL": "qwen-plus",
    "RAG_REWRITE_MODEL": "qwen-plus",
    "RAG_RERANK_MODEL": "qwen3-rerank",
    "RAG_VISION_MODEL": "qwen-vl-plus",
}

T = TypeVar("T")

_cache: dict[tuple[Any, ...], Any] = {}
_cache_lock = threading.Lock()


def clear_provider_cache() -> None:
    with _cache_lock:
        _cache.clear()


def _cached(key: tuple[Any, ...], build: Callable[[], T]) -> T:
    with _cache_lock:
        instance = _cache.get(key)
        if instance is None:
            instance = build()
            _cache[key] = instance
        return instance


def _setting(name: str, default: Any = None) -> Any:
    return getattr(settings, name, default)


def _required(name: str, default: Any = None) -> Any:
    value = _setting(name, default)
    if value in (None, ""):
        raise ImproperlyConfigured(f"{name} is not set")
    return value


def _provider() -> str:
    provider = _setting("RAG_PROVIDER", "local") or "local"
    if provider not in PROVIDERS:
        raise ImproperlyConfigured(f"RAG_PROVIDER must be one of {', '.join(PROVIDERS)}")
    return provider


def _connection_settings(provider: str) -> ConnectionSettings:
    """One provider's connection, shared by all its adapters."""
    if provider == "dashscope":
        api_key = _required("DASHSCOPE_API_KEY")
        base_url = _setting("DASHSCOPE_BASE_URL") or import_string("engines.providers.dashscope.DEFAULT_BASE_URL")
    else:
        base_url = _required("OPENAI_BASE_URL")
        api_key = _setting("OPENAI_API_KEY") or ""
    return ConnectionSettings(
        api_key=api_key,
        base_url=base_url,
        timeout=float(_setting("RAG_PROVIDER_TIMEOUT_SECONDS", 30.0)),
        max_retries=int(_setting("RAG_PROVIDER_MAX_RETRIES", 2)),
        retry_base_delay=float(_setting("RAG_PROVIDER_RETRY_BASE_DELAY_SECONDS", 0.5)),
    )


def _key(kind: str, provider: str, model: str, extra: Any, connection: ConnectionSettings) -> tuple:
    # The key stands for the configuration; the API key enters only as a digest.
    fingerprint = tuple(
        (name, hashlib.sha256(str(value).encode()).hexdigest() if name == "api_key" else value)
        for name, value in dataclasses.asdict(connection).items()
    )
    return (kind, provider, model, extra, fingerprint)


# Every remote adapter by dotted path, one table for all kinds: adding a provider is a row here
# and an entry in PROVIDERS, and an SDK is imported only when its provider is configured.
_REMOTE_ADAPTERS: dict[str, dict[str, str]] = {
    "dashscope": {
        "embedder": "engines.providers.dashscope.DashScopeEmbedder",
        "reranker": "engines.providers.dashscope.DashScopeReranker",
        "rewriter": "engines.providers.dashscope.DashScopeRewriter",
        "chat": "engines.providers.dashscope.DashScopeChatModel",
        "captioner": "engines.providers.dashscope.DashScopeCaptioner",
    },
    "openai": {
        "embedder": "engines.providers.openai_compat.OpenAIEmbedder",
        "reranker": "engines.providers.openai_compat.OpenAIReranker",
        "rewriter": "engines.providers.openai_compat.OpenAIRewriter",
        "chat": "engines.providers.openai_compat.OpenAIChatModel",
        "captioner": "engines.providers.openai_compat.OpenAICaptioner",
    },
}


def _adapter(kind: str, provider: str) -> Callable[..., Any]:
    return import_string(_REMOTE_ADAPTERS[provider][kind])


def _remote_backend(kind: str, provider: str, model_setting: str) -> Any:
    """The cached remote adapter of `kind` for the provider's current settings and model."""
    model = _model_setting(model_setting, provider)
    connection = _connection_settings(provider)
    adapter = _adapter(kind, provider)
    return _cached(
        _key(kind, provider, model, None, connection),
        lambda: adapter(model=model, connection=connection),
    )


def _model_setting(name: str, provider: str) -> str:
    if provider == "dashscope":
        return _setting(name) or _DASHSCOPE_MODELS[name]
    if name == "RAG_REWRITE_MODEL":
        return _setting(name) or _required("RAG_CHAT_MODEL")
    return _required(name)


def get_embedder(model: str | None = None, dimension: int | None = None) -> Embedder:
    model = model or _required("RAG_EMBEDDING_MODEL", LOCAL_EMBEDDING_MODEL)
    dimension = int(dimension or _required("RAG_EMBEDDING_DIMENSION"))
    if model == LOCAL_EMBEDDING_MODEL:
        return _cached(
            ("embedder", "local", model, dimension),
            lambda: LocalHashingEmbedder(dimension=dimension),
        )
    if model == E5_EMBEDDING_MODEL:
        threads = int(_setting("RAG_LOCAL_EMBEDDING_THREADS", 0)) or None
        batch_size = int(_setting("RAG_LOCAL_EMBEDDING_BATCH_SIZE", 16))
        timeout = float(_setting("RAG_LOCAL_EMBEDDING_TIMEOUT_SECONDS", 120.0))
        engine = _setting("RAG_LOCAL_EMBEDDING_ENGINE") or E5_ENGINE_MODULE
        try:
            return _cached(
                ("embedder", "local", model, dimension, threads, batch_size, timeout, engine),
                lambda: LocalE5Embedder(
                    dimension=dimension, threads=threads, batch_size=batch_size, timeout=timeout,
                    engine_module=engine,
                ),
            )
        except ValueError as exc:
            raise ImproperlyConfigured(str(exc)) from exc
    provider = _provider()
    if provider == "local":
        # The knowledge base was built with a remote model this deployment does not offer.
        raise ImproperlyConfigured(
            f"embedding model {model} needs RAG_PROVIDER=dashscope or RAG_PROVIDER=openai "
            "(RAG_PROVIDER is local)"
        )
    connection = _connection_settings(provider)
    adapter = _adapter("embedder", provider)
    if provider == "dashscope":
        return _cached(
            _key("embedder", provider, model, dimension, connection),
            lambda: adapter(model=model, dimension=dimension, connection=connection),
        )
    send_dimensions = bool(_setting("RAG_OPENAI_EMBEDDING_SEND_DIMENSIONS", False))
    return _cached(
        _key("embedder", provider, model, (dimension, send_dimensions), connection),
        lambda: adapter(model=model, dimension=dimension, send_dimensions=send_dimensions, connection=connection),
    )


def get_reranker() -> Reranker | None:
    """None with the local provider: no reranker that ships offline improves on hybrid fusion
    (the lexical one lowered nDCG@10 on every set measured with the e5 embedder, see
    evaluation/README.md), so a rerank request is a no-op that the trace notes. It stays
    selectable with RAG_RERANK_MODEL=local-lexical."""
    provider = _provider()
    if provider == "local":
        if _setting("RAG_RERANK_MODEL") == LocalLexicalReranker.name:
            return _cached(("reranker", "local"), LocalLexicalReranker)
        return None
    return _remote_backend("reranker", provider, "RAG_RERANK_MODEL")


def get_rewriter() -> QueryRewriter:
    provider = _provider()
    if provider == "local":
        return _cached(("rewriter", "local"), IdentityRewriter)
    return _remote_backend("rewriter", provider, "RAG_REWRITE_MODEL")


def get_chat_model() -> ChatModel:
    provider = _provider()
    if provider == "local":
        # No model that writes: answers come from the chat app's extractive answerer.
        return _cached(("chat", "local"), OfflineChatModel)
    return _remote_backend("chat", provider, "RAG_CHAT_MODEL")


def get_captioner() -> Captioner:
    provider = _provider()
    if provider == "local":
        return _cached(("captioner", "local"), LocalCaptioner)
    return _remote_backend("captioner", provider, "RAG_VISION_MODEL")


_LOCAL_DIMENSIONS = {E5_EMBEDDING_MODEL: 384, LOCAL_EMBEDDING_MODEL: 512}


def embedding_space(model: str | None = None, dimension: int | None = None) -> tuple[str, int]:
    """(model, dimension) for a new knowledge base: settings' defaults, or the named model with
    its own dimension (the local ones have one) or the given one."""
    if not model:
        return _required("RAG_EMBEDDING_MODEL"), int(dimension or _required("RAG_EMBEDDING_DIMENSION"))
    if model in _LOCAL_DIMENSIONS:
        if dimension and int(dimension) != _LOCAL_DIMENSIONS[model] and model == E5_EMBEDDING_MODEL:
            raise ImproperlyConfigured(f"{model} has {_LOCAL_DIMENSIONS[model]} dimensions")
        return model, int(dimension or _LOCAL_DIMENSIONS[model])
    if model == _setting("RAG_EMBEDDING_MODEL"):
        return model, int(dimension or _required("RAG_EMBEDDING_DIMENSION"))
    if not dimension:
        raise ImproperlyConfigured(f"the dimension of embedding model {model} is needed")
    return model, int(dimension)

def embedding_choices() -> tuple[tuple[str, int], ...]:
    """The embedding spaces a new knowledge base may be created in: the deployment's default
    first, then the local models, which need no key and no network."""
    spaces = [embedding_space()] + [(model, dimension) for model, dimension in _LOCAL_DIMENSIONS.items()]
    return tuple(dict.fromkeys(spaces))


__all__ = [
    "PROVIDERS",
    "clear_provider_cache",
    "embedding_choices",
    "embedding_space",
    "get_captioner",
    "get_chat_model",
    "get_embedder",
    "get_reranker",
    "get_rewriter",
    "get_web_search",
    "web_search_configured",
]


DEFAULT_VECTOR_STORE = "engines.milvus_store.get_vector_store"


def get_vector_store(*, embedding_model: str, dimension: int, analysis: str) -> VectorStore:
    """The store of one embedding space and text analysis, from the RAG_VECTOR_STORE factory."""
    factory = import_string(_setting("RAG_VECTOR_STORE") or DEFAULT_VECTOR_STORE)
    return factory(embedding_model=embedding_model, dimension=dimension, analysis=analysis)


def web_search_configured() -> bool:
    """Whether the deployment offers web search at all (knowledge bases switch it on each)."""
    return bool(_setting("RAG_WEB_SEARCH_BACKEND"))


def get_web_search() -> WebSearch | None:
    """The deployment's web search, from RAG_WEB_SEARCH_BACKEND; None when it is empty.

    ImproperlyConfigured when the backend is named but its endpoint or limits are not usable."""
    path = _setting("RAG_WEB_SEARCH_BACKEND") or ""
    if not path:
        return None
    try:
        config = WebSearchConfig(
            url=_required("RAG_WEB_SEARCH_URL"),
            api_key=_setting("RAG_WEB_SEARCH_API_KEY") or "",
            timeout=float(_setting("RAG_WEB_SEARCH_TIMEOUT_SECONDS") or DEFAULT_TIMEOUT_SECONDS),
            count=int(_setting("RAG_WEB_SEARCH_RESULTS") or DEFAULT_RESULT_COUNT),
            tool=_setting("RAG_WEB_SEARCH_TOOL") or "",
            query_argument=_setting("RAG_WEB_SEARCH_QUERY_ARGUMENT") or "",
            count_argument=_setting("RAG_WEB_SEARCH_COUNT_ARGUMENT") or "",
        )
    except ValueError as exc:
        raise ImproperlyConfigured(f"web search: {exc}") from exc
    adapter = import_string(path)
    # The key enters the cache key only as a digest, as the model adapters' do.
    fingerprint = tuple(
        (name, hashlib.sha256(str(value).encode()).hexdigest() if name == "api_key" else value)
        for name, value in dataclasses.asdict(config).items()
    )
    return _cached(("web_search", path, fingerprint), lambda: adapter(config=config))
