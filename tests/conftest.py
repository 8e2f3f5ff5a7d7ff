"""Shared fixtures, named by the state they put the world in."""

from __future__ import annotations

import hashlib
import itertools
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from rest_framework.test import APIClient

from knowledge import epochs
from knowledge.catalog import readiness
from knowledge.catalog import services as catalog_services
from knowledge.models import (
    Document,
    DocumentStatus,
    KnowledgeBase,
    KnowledgeBaseVersion,
    Visibility,
)
from tests.fakes.provider_server import FakeProviderServer

_counter = itertools.count(1)


def pytest_configure(config):
    # English catalogs are build output (not committed): compile them so i18n tests see them.
    import runpy
    from pathlib import Path

    runpy.run_path(str(Path(__file__).resolve().parent.parent / "scripts" / "compile_messages.py"), run_name="compile")["main"]()


@pytest.fixture(autouse=True)
def fresh_epoch_cache():
    """The in-process epoch cache outlives a test; ids are reused across tests."""
    from knowledge.epochs import l1_epochs

    l1_epochs.clear()
    yield
    l1_epochs.clear()


@pytest.fixture(autouse=True)
def fresh_caches():
    """Process-wide caches outlive a test while ids and epochs restart: start every test clean."""
    from django.core.cache import cache

    from engines.providers import clear_provider_cache

    cache.clear()
    yield
    cache.clear()
    clear_provider_cache()


@pytest.fixture
def provider_server() -> Iterator[FakeProviderServer]:
    """The fake model provider on 127.0.0.1 (DashScope and OpenAI wire formats)."""
    server = FakeProviderServer().start()
    yield server
    server.stop()


@pytest.fixture
def openai_provider(settings, provider_server) -> Iterator[FakeProviderServer]:
    """The app's chat, rewrite and rerank models served by the fake server as an OpenAI-compatible
    provider. Knowledge bases keep the embedding model they were built with (the local ones are
    served locally whatever the provider), so they need no re-ingestion."""
    from engines.providers import clear_provider_cache

    settings.RAG_PROVIDER = "openai"
    settings.OPENAI_BASE_URL = provider_server.openai_base_url
    settings.OPENAI_API_KEY = "sk-test"
    settings.RAG_CHAT_MODEL = "fake-chat"
    settings.RAG_RERANK_MODEL = "fake-rerank"
    settings.RAG_PROVIDER_MAX_RETRIES = 0
    settings.RAG_PROVIDER_TIMEOUT_SECONDS = 10.0
    clear_provider_cache()
    yield provider_server
    clear_provider_cache()


@pytest.fixture(autouse=True)
def default_language():
    """LocaleMiddleware activates a request's language on the thread and leaves it there."""
    from django.conf import settings
    from django.utils import translation

    yield
    translation.activate(settings.LANGUAGE_CODE)


# --- people ------------------------------------------------------------------------------------


@pytest.fixture
def staff_user(db) -> User:
    return User.objects.create_user("staff", password="pw-staff-123", is_staff=True, is_superuser=True)


@pytest.fixture
def member_user(db) -> User:
    return User.objects.create_user("member", password="pw-member-123")


@pytest.fixture
def engineers_group(db) -> Group:
    return Group.objects.create(name="engineers")


@pytest.fixture
def engineer_user(db, engineers_group) -> User:
    user = User.objects.create_user("engineer", password="pw-engineer-123")
    user.groups.add(engineers_group)
    return user


def api_client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def anonymous_api() -> APIClient:
    return APIClient()


@pytest.fixture
def staff_api(staff_user) -> APIClient:
    return api_client_for(staff_user)


@pytest.fixture
def member_api(member_user) -> APIClient:
    return api_client_for(member_user)


# --- knowledge ---------------------------------------------------------------------------------


def make_kb(*, slug: str | None = None, visibility: str = Visibility.INTERNAL, groups=(), actor=None) -> KnowledgeBase:
    n = next(_counter)
    return catalog_services.create_knowledge_base(
        slug=slug or f"kb-{n}", name=f"知识库 {n}", visibility=visibility,
        allowed_groups=list(groups), actor=actor, support_contact="IT 服务台 8000",
    )


def make_document(kb: KnowledgeBase, *, status: str = DocumentStatus.READY, title: str | None = None) -> Document:
    """A document row in a given state, for tests about versions rather than ingestion."""
    n = next(_counter)
    payload = f"document {n}".encode()
    return Document.objects.create(
        knowledge_base=kb,
        title=title or f"文档 {n}",
        file=f"kb/{kb.pk}/documents/test-{n}",
        original_name=f"doc-{n}.txt",
        file_type="txt",
        mime_type="text/plain",
        sha256=hashlib.sha256(payload).hexdigest(),
        size=len(payload),
        status=status,
    )


def make_ready_version(kb: KnowledgeBase, *, documents=None, actor=None) -> KnowledgeBaseVersion:
    draft = catalog_services.create_draft_version(kb=kb, actor=actor)
    for document in documents if documents is not None else [make_document(kb)]:
        draft.documents.add(document)
    return readiness.mark_version_ready(version=draft)


def publish_draft(kb: KnowledgeBase, *, actor) -> KnowledgeBase:
    """Activate the knowledge base's newest version once every document is ready; no cache
    entry from before survives."""
    version = KnowledgeBaseVersion.objects.filter(knowledge_base=kb).order_by("-number").first()
    assert version.status == "ready", [(d.title, d.status, d.error_code) for d in version.documents.all()]
    assert all(d.status == DocumentStatus.READY for d in version.documents.all())
    catalog_services.activate_version(version=version, actor=actor, reason="测试发布")
    kb.refresh_from_db()
    cache.clear()
    epochs.l1_epochs.clear()
    return kb


@pytest.fixture
def kb(db) -> KnowledgeBase:
    return make_kb()


@pytest.fixture
def kb_with_ready_version(kb) -> KnowledgeBase:
    make_ready_version(kb)
    return kb


@pytest.fixture
def kb_with_active_version(kb, staff_user) -> KnowledgeBase:
    version = make_ready_version(kb)
    catalog_services.activate_version(version=version, actor=staff_user, reason="首次发布")
    kb.refresh_from_db()
    return kb


@pytest.fixture
def kb_with_two_published_versions(kb, staff_user) -> KnowledgeBase:
    """v1 was active, v2 (v1's documents + one more) is active now."""
    first = make_ready_version(kb)
    catalog_services.activate_version(version=first, actor=staff_user, reason="v1")
    second = make_ready_version(kb, documents=[*first.documents.all(), make_document(kb)])
    catalog_services.activate_version(version=second, actor=staff_user, reason="v2")
    kb.refresh_from_db()
    return kb


@pytest.fixture
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


# --- real components: Milvus Lite, Redis, the task queue ----------------------------------------

REDIS_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")


def redis_test_prefix() -> str:
    """A key prefix of the calling test's own (never FLUSHDB: other runs may share the database),
    once Redis at REDIS_TEST_URL answers; a skip locally, a failure in CI (CI_REQUIRE_REDIS)."""
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except redis.exceptions.ConnectionError:
        if os.environ.get("CI_REQUIRE_REDIS"):
            raise
        pytest.skip(f"Redis is not reachable at {REDIS_URL}")
    return f"ragsite-test-{uuid.uuid4().hex}"


@contextmanager
def redis_cache_for(settings) -> Iterator[str]:
    """Django's cache on Redis at REDIS_TEST_URL under a key prefix of the test's own (yielded),
    its keys deleted after: what production shares between processes (limits, slots, the
    retrieval cache), for the test process and the servers it starts."""
    import redis

    prefix = redis_test_prefix()
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": prefix}
    }
    try:
        yield prefix
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)


@pytest.fixture
def redis_cache(settings) -> Iterator[str]:
    with redis_cache_for(settings) as prefix:
        yield prefix


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory):
    """One real Milvus Lite server (gRPC on loopback) for the whole session."""
    from tests.milvus import start_milvus_lite

    uri, stop = start_milvus_lite(tmp_path_factory.mktemp("milvus"))
    yield uri
    stop()


@pytest.fixture
def milvus(settings, milvus_server):
    """Point the app at the session's Milvus server, with a collection prefix of its own.

    A fresh prefix per test keeps tests independent without restarting the server.
    """
    from engines.milvus_store import reset_vector_store_cache

    prefix = f"t{next(_counter)}"
    settings.MILVUS_URI = milvus_server
    settings.MILVUS_COLLECTION_PREFIX = prefix
    reset_vector_store_cache()
    yield milvus_server
    reset_vector_store_cache()
    # Milvus Lite keeps every loaded collection in memory: left behind, a thousand tests' worth
    # grew the session's server past 20 GB and the machine into the OOM killer.
    _drop_collections(milvus_server, prefix=f"{prefix}_")


def _drop_collections(uri: str, *, prefix: str) -> None:
    from tests.milvus import admin_client

    client = admin_client(uri)
    try:
        for name in client.list_collections():
            if name.startswith(prefix):
                client.drop_collection(name)
    finally:
        client.close()


@pytest.fixture
def run_tasks(settings):
    """Run queued tasks inline as they are enqueued (after commit), like a worker would.

    django-tasks rebuilds its backends when TASKS changes (setting_changed), so this is enough.
    """
    settings.TASKS = {
        "default": {
            "BACKEND": "django_tasks.backends.immediate.ImmediateBackend",
            "QUEUES": ["default", "ingestion"],
        }
    }
    yield


@pytest.fixture
def database_tasks(settings):
    """The production queue: tasks become rows that a db_worker (or `bulk`) runs."""
    settings.TASKS = {
        "default": {
            "BACKEND": "django_tasks_db.DatabaseBackend",
            "QUEUES": ["default", "ingestion"],
        }
    }
    yield
