"""Redis gone: the production cache and event bus pointed at a port where nothing listens.

The cache is an optimisation (retrieval/cache.py): retrieval and chat still answer, through the
miss path. Ingestion progress events are hints (knowledge/events.py): an upload still succeeds.
Nothing answers with a 500.
"""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.chat.conftest import RAG_QUESTION
from tests.live import free_port

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def redis_gone(settings):
    port = free_port()
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                    "LOCATION": f"redis://127.0.0.1:{port}/0", "KEY_PREFIX": "ragsite"},
    }
    settings.EVENTSTREAM_REDIS = {"host": "127.0.0.1", "port": port, "db": 0, "password": None}
    return port


def test_retrieval_and_chat_answer_through_the_cache_miss_path(faults_kb, redis_gone, anonymous_api):
    # when
    searched = anonymous_api.post(
        "/api/retrieval/explain", {"knowledge_base_id": faults_kb.slug, "question": RAG_QUESTION}, format="json"
    )
    answered = anonymous_api.post(
        "/api/chat", {"knowledge_base_id": faults_kb.slug, "question": RAG_QUESTION}, format="json"
    )

    # then
    assert searched.status_code == 200, searched.content
    assert searched.json()["results"]
    assert searched.json()["trace"]["cache"]["hit_count"] == 0
    assert answered.status_code == 200, answered.content
    assert "24 个月" in answered.json()["answer"]


def test_an_upload_succeeds_when_its_progress_events_cannot_be_published(kb, staff_api, redis_gone, media_root, run_tasks, milvus):
    # when: upload and ingestion publish progress on the (dead) event bus after their commits
    response = staff_api.post(
        f"/api/knowledge-bases/{kb.slug}/documents/",
        {"files": [SimpleUploadedFile("制度.md", "# 制度\n\n出差住宿标准按城市级别执行。".encode())]},
        format="multipart",
    )

    # then
    assert response.status_code == 201, response.content
    kb.documents.get().refresh_from_db()
    assert kb.documents.get().status == "ready"
