"""The relevance score on the demo knowledge base built as `make run` builds it (e5 embedder):
on-topic questions score high, questions the knowledge base knows nothing about score low."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from django.core.management import call_command
from django.test import override_settings

from demo.questions import QUESTIONS
from knowledge.models import KnowledgeBase
from retrieval.contracts import RetrievalRequest
from retrieval.factory import build_retrieval_service
from retrieval.relevance import OFF_TOPIC_BELOW

# The module fixture builds in the test database, which a transactional test sets up.
pytestmark = pytest.mark.django_db(transaction=True)

OFF_TOPIC = [
    "今天北京天气怎么样？", "梅西在哪一年获得世界杯冠军？", "红烧肉怎么做才好吃？", "特斯拉的股价是多少？",
    "如何学习弹钢琴？", "月球离地球有多远？", "推荐几部好看的电影", "明天会下雨吗？", "怎么养多肉植物？",
    "世界上最高的山是哪座？", "Python 的 GIL 是什么？", "周末去哪里爬山比较好？",
]


@pytest.fixture(scope="module")
def measured(django_db_setup, django_db_blocker, milvus_server, tmp_path_factory) -> Iterator[dict]:
    """Top-1 relevance per mode for the demo questions and the off-topic ones, measured once:
    building the demo takes half a minute, and each test's flush would remove it."""
    from engines.milvus_store import reset_vector_store_cache
    from engines.providers import clear_provider_cache

    scratch = tmp_path_factory.mktemp("relevance-demo")
    with ExitStack() as stack:
        stack.enter_context(override_settings(
            RAG_EMBEDDING_MODEL="local-e5-small-v1", RAG_EMBEDDING_DIMENSION=384,
            MILVUS_URI=milvus_server, MILVUS_COLLECTION_PREFIX="relevance",
            MEDIA_ROOT=scratch / "media", VAR_DIR=scratch / "var", RAG_OCR_SECONDS_PER_PAGE=600.0,
            TASKS={"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default", "ingestion"]}},
        ))
        reset_vector_store_cache()
        clear_provider_cache()
        try:
            with django_db_blocker.unblock():
                call_command("bootstrap", "--username", "relevance-admin", stdout=io.StringIO())
                kb = KnowledgeBase.objects.get(slug="demo")
                result: dict = {"space": (kb.embedding_model, kb.embedding_dimension, kb.text_analysis)}
                for mode in ("hybrid", "dense"):
                    result[mode, "on"] = [top_relevance(kb, item["question"], mode) for item in QUESTIONS]
                    result[mode, "off"] = [top_relevance(kb, question, mode) for question in OFF_TOPIC]
            yield result
        finally:
            with django_db_blocker.unblock():
                call_command("flush", interactive=False, verbosity=0)
            reset_vector_store_cache()


def top_relevance(kb: KnowledgeBase, question: str, mode: str) -> float:
    results = build_retrieval_service(kb).retrieve(
        RetrievalRequest(kb_id=kb.pk, question=question, mode=mode, use_cache=False)
    ).results
    return results[0].relevance if results else 0.0


def test_the_demo_knowledge_base_uses_the_semantic_embedder(measured):
    assert measured["space"] == ("local-e5-small-v1", 384, "terms-v1")


def test_hybrid_relevance_separates_on_topic_from_off_topic_questions(measured):
    # given
    on_topic, off_topic = measured["hybrid", "on"], measured["hybrid", "off"]

    # then: measured 0.72-1.0 against 0.0-0.40
    assert min(on_topic) >= 0.6, on_topic
    assert max(off_topic) < 0.5, off_topic
    assert sum(score < OFF_TOPIC_BELOW for score in off_topic) >= len(OFF_TOPIC) * 0.75, off_topic


def test_dense_relevance_is_the_calibrated_cosine(measured):
    # given
    on_topic, off_topic = sorted(measured["dense", "on"]), sorted(measured["dense", "off"])

    # then: medians far apart (measured 0.88 against 0.20)
    assert on_topic[len(on_topic) // 2] > 0.7
    assert off_topic[len(off_topic) // 2] < OFF_TOPIC_BELOW
