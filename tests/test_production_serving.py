"""Production serves its pages, run as an operator deploys: `migrate` and `collectstatic
--noinput` with production settings in subprocesses, then the real server (daphne
ragsite.asgi:application) with the same settings, behind what a TLS-terminating proxy sends
(`X-Forwarded-Proto: https`, which production settings trust). Every page and every static file
it references must answer 200: the collected, hashed files are what production serves.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.live import free_port

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

PAGES = ["/", "/admin/login/", "/api/docs/"]
PROXIED = {"X-Forwarded-Proto": "https"}


def production_env(tmp_path: Path) -> dict[str, str]:
    """Nothing but what `.env.example` says production needs, on a scratch SQLite file."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DJANGO_", "DATABASE_URL", "REDIS_URL", "AWS_", "RAG_", "MILVUS_", "STATIC_"))}
    clean.update(
        DJANGO_SETTINGS_MODULE="ragsite.settings.production",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        RAGSITE_VAR_DIR=str(tmp_path / "var"),
        STATIC_ROOT=str(tmp_path / "static"),
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
    )
    return clean


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )



@pytest.fixture
def deployed(tmp_path) -> dict[str, str]:
    """A scratch deployment: migrated, static files collected."""
    env = production_env(tmp_path)
    (tmp_path / "var").mkdir()
    migrate = manage(env, "migrate", "--noinput")
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr[-3000:]
    return env


@pytest.fixture
def production_server(deployed, tmp_path) -> Iterator[str]:
    """daphne on the deployment, as the Procfile starts it; yields the base URL."""
    collect = manage(deployed, "collectstatic", "--noinput")
    assert collect.returncode == 0, collect.stdout + collect.stderr[-3000:]
    port = free_port()
    log = (tmp_path / "daphne.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "ragsite.asgi:application"],
        cwd=ROOT, env=deployed, stdout=log, stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(base_url + "/favicon.ico", headers=PROXIED, timeout=2)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("daphne did not start: " + (tmp_path / "daphne.log").read_text()[-3000:])
                time.sleep(0.2)
        yield base_url
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def referenced_assets(html: str) -> set[str]:
    """Same-site URLs of the stylesheets, scripts and icons a page loads."""
    found = set(re.findall(r"<(?:script|img)\b[^>]*\ssrc=\"([^\"]+)\"", html))
    found |= set(re.findall(r"<link\b[^>]*\shref=\"([^\"]+)\"", html))
    return {url for url in found if url.startswith("/")}


def test_collectstatic_succeeds_with_production_settings(deployed):
    # when: the deploy step an operator runs
    collect = manage(deployed, "collectstatic", "--noinput")
    # then: every file is collected and hashed, the vendored libraries included
    assert collect.returncode == 0, collect.stdout + collect.stderr[-3000:]
    static = Path(deployed["STATIC_ROOT"])
    manifest = (static / "staticfiles.json").read_text()
    assert "vendor/marked/marked.umd.js" in manifest and "vendor/dompurify/purify.min.js" in manifest


def test_production_server_serves_pages_and_their_static_files(production_server):
    with httpx.Client(base_url=production_server, headers=PROXIED, timeout=30) as client:
        for page in PAGES:
            # when
            response = client.get(page)
            # then: the HTML page, and every file it loads from this site
            assert response.status_code == 200, (page, response.status_code, response.text[:500])
            assert response.headers["content-type"].startswith("text/html"), page
            assets = referenced_assets(response.text)
            assert any(url.endswith(".css") for url in assets), (page, assets)
            assert any(url.endswith(".js") for url in assets), (page, assets)
            for url in assets:
                asset = client.get(url)
                assert asset.status_code == 200, (page, url, asset.status_code)
                assert asset.content, (page, url)
        # and: the chat page loads the hashed (collected) copies, not the source files
        home = client.get("/").text
        assert re.search(r"/static/vendor/marked/marked\.umd\.[0-9a-f]{12}\.js", home), home[:2000]


def test_production_redirects_plain_http_to_https(production_server):
    # when: a request that did not come through the TLS proxy
    response = httpx.get(production_server + "/", timeout=30)
    # then
    assert response.status_code == 301
    assert response.headers["location"] == production_server.replace("http://", "https://") + "/"
