"""`.env.example` works exactly as it says: copied to `.env`, the project starts on it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = (
    "import json, django; from django.conf import settings; django.setup(); "
    "print(json.dumps({'secret': settings.SECRET_KEY, 'db': settings.DATABASES['default']['ENGINE'], "
    "'provider': settings.RAG_PROVIDER, 'milvus': settings.MILVUS_URI, 'hosts': settings.ALLOWED_HOSTS, "
    "'debug': settings.DEBUG, 'var': str(settings.VAR_DIR), 'threads': settings.RAG_CHAT_THREADS}))"
)


def project_copy(target: Path) -> Path:
    """The tracked project as a user would check it out, with `.env` copied from the example."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            destination = target / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    shutil.copy2(target / ".env.example", target / ".env")
    return target


def run_in(project: Path, *args: str) -> subprocess.CompletedProcess:
    # As a user's shell would be: nothing of ours set, so only .env speaks.
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DJANGO_", "DATABASE_URL", "REDIS_URL", "AWS_", "RAG_", "MILVUS_"))}
    return subprocess.run([sys.executable, *args], cwd=project, capture_output=True, text=True, timeout=120, env=clean)


def test_a_copy_of_env_example_passes_manage_py_check(tmp_path):
    # given
    project = project_copy(tmp_path / "ragsite")
    # when
    check = run_in(project, "manage.py", "check")
    probe = run_in(project, "-c", f"import os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'ragsite.settings.local'); {PROBE}")
    # then: it starts, and no comment or empty value was read as a setting
    assert check.returncode == 0, check.stderr[-2000:]
    assert probe.returncode == 0, probe.stderr[-2000:]
    values = json.loads(probe.stdout.strip().splitlines()[-1])
    # no key ships with the project: this copy generated its own under var/ and kept it
    key_file = project / "var" / "secret_key"
    assert values["secret"] == key_file.read_text().strip() and len(values["secret"]) >= 50
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert values["db"] == "django.db.backends.sqlite3"
    assert values["provider"] == "local"
    assert values["milvus"].endswith(".db") and values["var"] == str(project / "var")
    assert values["hosts"] == ["127.0.0.1", "localhost"]
    assert values["threads"] == 32
    assert "#" not in json.dumps(values)
