"""Wiring: the RetrievalService of a knowledge base, with the adapters chosen in settings."""

from __future__ import annotations

import logging

from django.utils.translation import gettext as _
from django.core.exceptions import ImproperlyConfigured

from engines.ports import ProviderUnavailable, RerankScore
from engines.providers import get_chat_model, get_embedder, get_reranker, get_rewriter
from knowledge.access import access_knowledge_base
from knowledge.epochs import current_epoch
from knowledge.models import KnowledgeBase
from knowledge.vectors import store_for

from .cache import DjangoRetrievalCache
from .contracts import RetrievalMisconfigured, RetrievalRequest, RetrievalResponse
from .faqs import FaqRetrieval
from .repository import DjangoRepository
from .service import RetrievalService, channel_pool

logger = logging.getLogger(__name__)


class _NotConfigured:
    """Stands in for an optional model (rewrite, rerank) the deployment did not configure.

    Using it fails like a provider outage, so the request degrades as specified (original query
    / fusion order kept, the trace says why) instead of refusing every retrieval.
    """

    def __init__(self, name: str, reason: str) -> None:
        self.name = f"unconfigured:{name}"
        self.reason = reason

    def rewrite(self, question: str) -> str | None:
        raise ProviderUnavailable(f"query rewriter not configured: {self.reason}")

    def rerank(self, query, documents, *, top_n) -> list[RerankScore]:
        raise ProviderUnavailable(f"reranker not configured: {self.reason}")


def _optional(build, name: str):
    try:
        return build()
    except ImproperlyConfigured as exc:
        logger.warning("%s is not configured: %s", name, exc)
        return _NotConfigured(name, str(exc))


def build_retrieval_service(kb: KnowledgeBase) -> RetrievalService:
    try:
        return _build(kb)
    except ImproperlyConfigured as exc:
        logger.error("retrieval for knowledge base %s is misconfigured: %s", kb.slug, exc)
        raise RetrievalMisconfigured(
            _("该知识库的检索服务配置不可用（向量模型或向量库设置与部署不一致），请联系管理员。")
        ) from exc


def build_faq_retrieval(kb: KnowledgeBase) -> FaqRetrieval:
    """FAQ retrieval in the knowledge base's embedding space, with the same cache and pool."""
    try:
        return FaqRetrieval(
            embedder=get_embedder(kb.embedding_model, kb.embedding_dimension),
            store=store_for(kb),
            dictionary=kb.dictionary_terms,
            executor=channel_pool(),
            cache=DjangoRetrievalCache(),
            epochs=lambda kb_id: current_epoch(kb_id=kb_id),
        )
    except ImproperlyConfigured as exc:
        logger.error("FAQ retrieval for knowledge base %s is misconfigured: %s", kb.slug, exc)
        raise RetrievalMisconfigured(
            _("该知识库的检索服务配置不可用（向量模型或向量库设置与部署不一致），请联系管理员。")
        ) from exc


def retrieve_for_user(*, user, knowledge_base_id: str, question: str, **options) -> RetrievalResponse:
    """The permission-checked entry point of the API and the admin hit test."""
    kb = access_knowledge_base(user=user, kb_id=knowledge_base_id)
    request = RetrievalRequest(kb_id=kb.pk, question=question, **options)
    return build_retrieval_service(kb).retrieve(request)


def _build(kb: KnowledgeBase) -> RetrievalService:
    # A model that cannot write (the local extractive one) cannot write a hypothetical answer:
    # HyDE is then reported as unavailable instead of failing on every request.
    hyde_model = None
    try:
        model = get_chat_model()
        hyde_model = model if model.generative else None
    except ImproperlyConfigured as exc:
        logger.warning("chat model is not configured, HyDE unavailable: %s", exc)
    return RetrievalService(
        repository=DjangoRepository(),
        embedder=get_embedder(kb.embedding_model, kb.embedding_dimension),
        store=store_for(kb),
        dictionary=kb.dictionary_terms,
        rewriter=_optional(get_rewriter, "rewriter"),
        reranker=_optional(get_reranker, "reranker"),
        hyde_model=hyde_model,
        cache=DjangoRetrievalCache(),
        epochs=lambda kb_id: current_epoch(kb_id=kb_id),
    )
