"""The embedded default as `make run` starts it: honcho on the Procfile (Milvus Lite, daphne and
the ingestion worker, each under `scripts/keep_running.py`) on a scratch SQLite deployment.

The probe's finding, reproduced from outside: an editor imports, through the admin's item-import
page, a 167 KB workbook whose string table unpacks to 68 MB. The import held SQLite's write lock
while openpyxl read it; the worker's poll failed, the worker exited, and honcho stopped Milvus and
the web process with it. Here the import is refused at once with its reason, every process keeps
serving, and a process that does end is restarted and says so.

This test starts its own SQLite deployment whatever DATABASE_URL the suite runs on: the embedded
default is what it is about.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.knowledge.test_intake import string_table_bomb
from tests.live import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
HONCHO = Path(sys.executable).parent / "honcho"

SETUP = """
from django.contrib.auth.models import Group, User
from rest_framework.authtoken.models import Token
from knowledge.catalog.services import create_knowledge_base
editors = Group.objects.create(name="产品编辑")
editor = User.objects.create_user("editor", password="pw-editor-123", is_staff=True)
editor.groups.add(editors)
create_knowledge_base(slug="products", name="产品", actor=None, editor_groups=[editors])
print("TOKEN", Token.objects.create(user=editor).key)
"""


def embedded_env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_URL", "AWS_", "RAG_", "MILVUS_"))}
    clean.update(
        DJANGO_SETTINGS_MODULE="ragsite.settings.local", RAGSITE_VAR_DIR=str(tmp_path / "var"),
        HOST="127.0.0.1", WEB_PORT=str(free_port()), MILVUS_PORT=str(free_port()),
        # The lexical embedder and no warm-up or OCR: this is about the processes, not the models.
        RAG_EMBEDDING_MODEL="local-hash-lexical-v1", RAG_EMBEDDING_DIMENSION="512",
        RAG_WARM_UP="false", RAG_OCR_ENABLED="false",
    )
    return clean


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def processes_below(pid: int) -> dict[int, str]:
    """pid → command line of every descendant of `pid`."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in found:
                found[child] = commands.get(child, "")
                frontier.append(child)
    return found


def wait_until(predicate, *, within: float, what: str, log: Path):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what} within {within:g} s\n{log.read_text()[-4000:]}")


def signed_in(base_url: str, username: str, password: str) -> httpx.Client:
    client = httpx.Client(base_url=base_url, timeout=60, follow_redirects=True)
    page = client.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    client.post("/admin/login/", data={"username": username, "password": password, "csrfmiddlewaretoken": token,
                                       "next": "/admin/"})
    assert "sessionid" in client.cookies, "sign-in failed"
    return client


def uploaded_and_ready(base_url: str, token: str, name: str, log: Path) -> None:
    headers = {"Authorization": f"Token {token}"}
    text = f"# {name}\n\n星河X3 的保修期为 24 个月。{name}。".encode()
    response = httpx.post(f"{base_url}/api/knowledge-bases/products/documents/", headers=headers, timeout=60,
                          files={"files": (f"{name}.md", text, "text/markdown")})
    assert response.status_code == 201, response.text
    document_id = response.json()[0]["document"]["id"]

    def status() -> bool:
        detail = httpx.get(f"{base_url}/api/knowledge-bases/products/documents/{document_id}/", headers=headers,
                           timeout=30)
        return detail.status_code == 200 and detail.json()["status"] == "ready"

    wait_until(status, within=120, what=f"{name} ready", log=log)


def test_an_editors_bomb_import_leaves_every_process_serving_and_a_dead_one_comes_back(tmp_path):
    # given: a migrated scratch deployment with an editor of one base, and the Procfile running
    env = embedded_env(tmp_path)
    migrate = manage(env, "migrate", "--noinput")
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    setup = manage(env, "shell", "-c", SETUP)
    assert setup.returncode == 0, setup.stderr[-3000:]
    token = setup.stdout.split("TOKEN", 1)[1].strip()
    log = tmp_path / "honcho.log"
    with log.open("w") as output:
        honcho = subprocess.Popen([str(HONCHO), "-f", "Procfile", "start"], cwd=ROOT, env=env, stdout=output,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    base_url = f"http://127.0.0.1:{env['WEB_PORT']}"
    try:
        wait_until(lambda: _answers(base_url + "/admin/login/"), within=120, what="the web process serving", log=log)
        editor = signed_in(base_url, "editor", "pw-editor-123")

        # when: the editor imports the probe's workbook through the admin
        page = editor.get("/admin/knowledge/item/import/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        knowledge_base = re.search(r'<option value="(\d+)"[^>]*>产品', page.text).group(1)
        started = time.monotonic()
        imported = editor.post("/admin/knowledge/item/import/", data={"csrfmiddlewaretoken": csrf,
                                                                       "knowledge_base": knowledge_base},
                               files={"file": ("items.xlsx", string_table_bomb(), "application/octet-stream")})
        elapsed = time.monotonic() - started

        # then: refused at once, with the reason, and every process serves: a document is read,
        # embedded into Milvus and made ready by the worker
        assert imported.status_code == 200 and "疑似压缩炸弹" in imported.text, imported.text[-2000:]
        assert elapsed < 10, elapsed
        uploaded_and_ready(base_url, token, "保修说明", log)
        assert honcho.poll() is None, log.read_text()[-4000:]
        assert "stopped" not in log.read_text()

        # when: the worker process dies anyway (killed)
        workers = [pid for pid, command in processes_below(honcho.pid).items()
                   if "manage.py ingestion_worker" in command and "keep_running" not in command
                   and not command.startswith(("/bin/sh", "sh "))]
        assert workers, processes_below(honcho.pid)
        os.kill(workers[0], signal.SIGKILL)

        # then: it is restarted, the run says so, and the stack still serves
        wait_until(lambda: "worker 意外退出" in log.read_text(), within=30, what="the restart said", log=log)
        uploaded_and_ready(base_url, token, "退货政策", log)
        assert honcho.poll() is None, log.read_text()[-4000:]
    finally:
        os.killpg(honcho.pid, signal.SIGTERM)
        try:
            honcho.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(honcho.pid, signal.SIGKILL)
            honcho.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.TransportError:
        return False
