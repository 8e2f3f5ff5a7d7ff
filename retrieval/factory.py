"""Wiring: the RetrievalService of a knowledge base, with the adapters chosen in settings."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.utils.translation import gettext as _
from django.core.exceptions import ImproperlyConfigured

from engines.ports import ProviderUnavailable, RerankScore, WebSearch
from engines.providers import get_chat_model, get_embedder, get_reranker, get_rewriter, get_web_search
from knowledge.access import access_knowledge_base
from knowledge.epochs import current_epoch
from knowledge.models import KnowledgeBase
from knowledge.vectors import store_for

from .cache import DjangoRetrievalCache
from .contracts import RetrievalMisconfigured, RetrievalRequest, RetrievalResponse
from .faqs import FaqRetrieval
from .federation import DocumentSearch, FaqSearch, FederatedFaqs, FederatedRetrieval, grouped_by_space
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


def build_retrieval_service(kb: KnowledgeBase, *, also: Sequence[KnowledgeBase] = ()) -> RetrievalService:
    """`kb`'s retrieval; with `also` (bases of the same embedding space, `space_of`), the one
    that searches them with it as one scope (`RetrievalRequest.also_kb_ids`)."""
    try:
        return _build(kb, dictionary=_dictionary(kb, also))
    except ImproperlyConfigured as exc:
        logger.error("retrieval for knowledge base %s is misconfigured: %s", kb.slug, exc)
        raise RetrievalMisconfigured(
            _("该知识库的检索服务配置不可用（向量模型或向量库设置与部署不一致），请联系管理员。")
        ) from exc


def build_faq_retrieval(kb: KnowledgeBase, *, also: Sequence[KnowledgeBase] = ()) -> FaqRetrieval:
    """FAQ retrieval in the knowledge base's embedding space, with the same cache and pool."""
    try:
        return FaqRetrieval(
            embedder=get_embedder(kb.embedding_model, kb.embedding_dimension),
            store=store_for(kb),
            dictionary=_dictionary(kb, also),
            executor=channel_pool(),
            cache=DjangoRetrievalCache(),
            epochs=lambda kb_id: current_epoch(kb_id=kb_id),
        )
    except ImproperlyConfigured as exc:
        logger.error("FAQ retrieval for knowledge base %s is misconfigured: %s", kb.slug, exc)
        raise RetrievalMisconfigured(
            _("该知识库的检索服务配置不可用（向量模型或向量库设置与部署不一致），请联系管理员。")
        ) from exc


def space_of(kb: KnowledgeBase) -> tuple[str, int, str]:
    """What decides whether two knowledge bases' vectors and terms can be searched together."""
    return (kb.embedding_model, kb.embedding_dimension, kb.text_analysis)


def build_scope_retrieval(kbs: Sequence[KnowledgeBase]) -> DocumentSearch:
    """Document retrieval over `kbs` (access already checked), `kbs[0]` the asked one: one
    service per embedding space, federated only when there is more than one space."""
    groups = grouped_by_space(kbs, space=space_of)
    if len(groups) == 1:
        return build_retrieval_service(groups[0][0], also=groups[0][1:])
    return FederatedRetrieval(members=tuple(
        (build_retrieval_service(group[0], also=group[1:]), tuple(kb.pk for kb in group)) for group in groups
    ))


def build_scope_faqs(kbs: Sequence[KnowledgeBase]) -> FaqSearch:
    groups = grouped_by_space(kbs, space=space_of)
    if len(groups) == 1:
        return build_faq_retrieval(groups[0][0], also=groups[0][1:])
    return FederatedFaqs(members=tuple(
        (build_faq_retrieval(group[0], also=group[1:]), tuple(kb.pk for kb in group)) for group in groups
    ))


def _dictionary(kb: KnowledgeBase, also: Sequence[KnowledgeBase]) -> tuple[str, ...]:
    """Every base's domain terms: the query is analysed once for all of them."""
    if not also:
        return kb.dictionary_terms
    return tuple(dict.fromkeys(term for base in (kb, *also) for term in base.dictionary_terms))


def retrieve_for_user(*, user, knowledge_base_id: str, question: str, **options) -> RetrievalResponse:
    """The permission-checked entry point of the API and the admin hit test."""
    kb = access_knowledge_base(user=user, kb_id=knowledge_base_id)
    request = RetrievalRequest(kb_id=kb.pk, question=question, **options)
    return build_retrieval_service(kb).retrieve(request)


def _build(kb: KnowledgeBase, *, dictionary: tuple[str, ...]) -> RetrievalService:
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
        dictionary=dictionary,
        rewriter=_optional(get_rewriter, "rewriter"),
        reranker=_optional(get_reranker, "reranker"),
        hyde_model=hyde_model,
        cache=DjangoRetrievalCache(),
        epochs=lambda kb_id: current_epoch(kb_id=kb_id),
        web_search=_web_search_for(kb),
    )


def _web_search_for(kb: KnowledgeBase) -> WebSearch | None:
    """The deployment's web search for a knowledge base whose staff switched it on, else None.

    A misconfigured backend leaves the knowledge base answering from its own documents (the
    trace notes `web_search_unavailable` for a question that asked for the web)."""
    if not kb.web_search_enabled:
        return None
    try:
        return get_web_search()
    except ImproperlyConfigured as exc:
        logger.error("web search is misconfigured: %s", exc)
        return None
