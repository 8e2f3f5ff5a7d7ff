"""Choosing and caching adapters from settings."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.exceptions import ImproperlyConfigured

from engines.providers import (
    clear_provider_cache,
    get_captioner,
    get_chat_model,
    get_embedder,
    get_reranker,
    get_rewriter,
)
from engines.providers.dashscope import (
    DashScopeChatModel,
    DashScopeEmbedder,
    DashScopeReranker,
    DashScopeRewriter,
)
from engines.providers.local import (
    IdentityRewriter,
    LocalCaptioner,
    LocalHashingEmbedder,
    LocalLexicalReranker,
    OfflineChatModel,
)
from engines.providers.openai_compat import OpenAIChatModel, OpenAIEmbedder, OpenAIRewriter


@pytest.fixture(autouse=True)
def fresh_cache():
    clear_provider_cache()
    yield
    clear_provider_cache()


@pytest.fixture
def dashscope_settings(settings):
    settings.RAG_PROVIDER = "dashscope"
    settings.DASHSCOPE_API_KEY = "sk-factory-test"
    settings.DASHSCOPE_BASE_URL = "http://127.0.0.1:9/api/v1"
    return settings


@pytest.fixture
def openai_settings(settings):
    settings.RAG_PROVIDER = "openai"
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    settings.OPENAI_API_KEY = ""
    settings.RAG_CHAT_MODEL = "qwen2.5-7b-instruct"
    return settings


def test_local_provider_gives_the_offline_adapters(settings):
    # given
    settings.RAG_PROVIDER = "local"

    # when / then
    assert isinstance(get_embedder(), LocalHashingEmbedder)
    assert get_reranker() is None  # no offline reranker helps; rerank is a traced no-op
    assert isinstance(get_rewriter(), IdentityRewriter)
    assert isinstance(get_chat_model(), OfflineChatModel)
    assert isinstance(get_captioner(), LocalCaptioner)


def test_the_lexical_local_reranker_stays_selectable_by_name(settings):
    # given
    settings.RAG_PROVIDER = "local"
    settings.RAG_RERANK_MODEL = "local-lexical"

    # then
    assert isinstance(get_reranker(), LocalLexicalReranker)


def test_an_embedder_follows_the_knowledge_base_model_and_dimension(dashscope_settings):
    # given / when
    remote = get_embedder("text-embedding-v4", 768)
    offline = get_embedder("local-hash-lexical-v1", 256)

    # then
    assert isinstance(remote, DashScopeEmbedder)
    assert (remote.model, remote.dimension) == ("text-embedding-v4", 768)
    assert isinstance(offline, LocalHashingEmbedder)
    assert offline.dimension == 256


def test_a_remote_embedding_model_cannot_be_served_offline(settings):
    # given
    settings.RAG_PROVIDER = "local"

    # when / then
    with pytest.raises(ImproperlyConfigured, match="RAG_PROVIDER"):
        get_embedder("text-embedding-v4", 1024)


def test_dashscope_defaults_to_the_bailian_models(dashscope_settings):
    # given / when
    chat, rewriter, reranker = get_chat_model(), get_rewriter(), get_reranker()

    # then
    assert isinstance(chat, DashScopeChatModel) and chat.model == "qwen-plus"
    assert isinstance(rewriter, DashScopeRewriter) and rewriter.model == "qwen-plus"
    assert isinstance(reranker, DashScopeReranker) and reranker.model == "qwen3-rerank"


def test_a_missing_key_names_the_environment_variable(dashscope_settings):
    # given
    dashscope_settings.DASHSCOPE_API_KEY = ""

    # when / then
    with pytest.raises(ImproperlyConfigured, match="DASHSCOPE_API_KEY is not set"):
        get_chat_model()


def test_openai_needs_a_base_url_and_explicit_models(openai_settings):
    # given / when
    chat, rewriter = get_chat_model(), get_rewriter()

    # then
    assert isinstance(chat, OpenAIChatModel) and chat.model == "qwen2.5-7b-instruct"
    assert isinstance(rewriter, OpenAIRewriter) and rewriter.model == "qwen2.5-7b-instruct"
    assert isinstance(get_embedder("bge-m3", 1024), OpenAIEmbedder)
    with pytest.raises(ImproperlyConfigured, match="RAG_RERANK_MODEL is not set"):
        get_reranker()
    openai_settings.OPENAI_BASE_URL = ""
    with pytest.raises(ImproperlyConfigured, match="OPENAI_BASE_URL is not set"):
        get_chat_model()


def test_an_unknown_provider_is_a_configuration_error(settings):
    # given
    settings.RAG_PROVIDER = "somewhere"

    # when / then
    with pytest.raises(ImproperlyConfigured, match="RAG_PROVIDER"):
        get_reranker()


def test_instances_are_cached_per_configuration_across_threads(dashscope_settings):
    # given
    with ThreadPoolExecutor(max_workers=8) as pool:
        instances = list(pool.map(lambda _: get_embedder("text-embedding-v4", 1024), range(32)))

    # when
    dashscope_settings.RAG_PROVIDER_TIMEOUT_SECONDS = 5
    reconfigured = get_embedder("text-embedding-v4", 1024)

    # then
    assert all(instance is instances[0] for instance in instances)
    assert get_embedder("text-embedding-v4", 512) is not instances[0]
    assert reconfigured is not instances[0]
