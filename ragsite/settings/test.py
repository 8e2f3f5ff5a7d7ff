"""Test settings: PostgreSQL when DATABASE_URL is set (CI), SQLite otherwise."""

import tempfile
from pathlib import Path

from .base import *  # noqa: F401,F403
from .base import env

SECRET_KEY = "test-only-key"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]

# Each test run gets its own scratch area so parallel runs and leftovers never collide.
TEST_VAR_DIR = Path(tempfile.mkdtemp(prefix="ragsite-test-"))
MEDIA_ROOT = TEST_VAR_DIR / "media"
MILVUS_URI = env("MILVUS_URI", default=str(TEST_VAR_DIR / "milvus.db"))

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file, not shared-cache memory: threads in concurrency tests then get real locking
    # (busy timeout, WAL) as in the embedded deployment, instead of "table is locked" errors.
    DATABASES["default"]["TEST"] = {"NAME": str(TEST_VAR_DIR / "test.sqlite3")}  # noqa: F405
else:
    # Worker threads (chat turns, retrieval channels) keep connections open within
    # CONN_MAX_AGE; in tests they must close after each use so the test database can be
    # flushed and dropped.
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

RAG_WARM_UP = False
# No span of the suite leaves the machine, whatever the shell exports; tests/telemetry points the
# servers it starts at a receiver of its own.
OTEL_EXPORTER_OTLP_ENDPOINT = ""
RAG_PROVIDER = "local"
RAG_EMBEDDING_MODEL = "local-hash-lexical-v1"
RAG_EMBEDDING_DIMENSION = 512
RAG_MAX_UPLOAD_BYTES = 2 * 1024 * 1024
# In-process `call_command("ingest")` runs under overridden settings (test database, Milvus
# prefix, media root) that a helper process started from the environment would not see; the
# multi-process path is tested through the real command in a subprocess.
RAG_INGEST_WORKERS = 1

# Tasks are recorded, not run, unless a test asks for it (see the `run_tasks` fixture): most
# tests are about what gets queued, and ingestion tests drive the pipeline explicitly.
TASKS = {
    "default": {
        "BACKEND": "django_tasks.backends.dummy.DummyBackend",
        "QUEUES": ["default", "ingestion"],
    }
}

# Abuse limits are off for the suite (clients there ask many questions quickly from one address);
# tests/test_throttles.py and tests/chat/test_limits.py switch them on with their own values.
REST_FRAMEWORK = {
    **REST_FRAMEWORK,  # noqa: F405
    "DEFAULT_THROTTLE_RATES": {scope: None for scope in RAG_THROTTLE_RATES},  # noqa: F405
}
RAG_MAX_STREAMS_PER_USER = 1000
RAG_MAX_STREAMS_PER_ANON_IP = 1000
