"""Production settings pass `manage.py check --deploy` with no warning, run as an operator would:
the real command in a subprocess, on nothing but the variables `.env.example` says production
needs."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def deploy_check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DJANGO_", "DATABASE_URL", "REDIS_URL", "AWS_", "RAG_", "MILVUS_"))}
    clean.update(
        DJANGO_SETTINGS_MODULE="ragsite.settings.production",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="kb.example.com",
        RAGSITE_VAR_DIR=str(tmp_path / "var"),
        **env,
    )
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, capture_output=True, text=True, timeout=180, env=clean,
    )


def test_production_settings_pass_the_deploy_check_with_no_warning(tmp_path):
    # when
    check = deploy_check(tmp_path)
    # then
    assert check.returncode == 0, check.stdout + check.stderr[-3000:]
    assert "System check identified no issues (0 silenced)." in check.stdout
    assert "WARNINGS" not in check.stderr + check.stdout


def test_the_https_settings_are_the_operators_to_relax(tmp_path):
    # given: a deployment that terminates TLS elsewhere and does not want HSTS yet
    relaxed = {"DJANGO_SECURE_SSL_REDIRECT": "false", "DJANGO_SECURE_HSTS_SECONDS": "0"}
    # when
    check = deploy_check(tmp_path, **relaxed)
    # then: the check says what that gives up
    assert check.returncode != 0
    output = check.stdout + check.stderr
    assert "security.W004" in output and "security.W008" in output
