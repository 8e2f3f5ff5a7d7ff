"""Input that the embedding engine cannot take, sent from outside to a real daphne and a real
ingestion worker (each started as its command, in a subprocess): both answer and keep serving.

The reproductions are the ones that used to kill them: twenty U+FDFA in a search, 1,500 in a
chat question, thirty in a Markdown file. The servers run the real bundled engine behind a fake
that also dies on one more input (`ABORT_MARKER`, an input "nobody has found yet"), to show
that an engine which still dies costs one engine child, once, and never the server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from engines.providers.e5 import E5_DIMENSION, E5_EMBEDDING_MODEL
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.models import Document, DocumentStatus, KnowledgeBase, Visibility
from tests.chat.conftest import publish_draft
from tests.fakes.aborting_e5 import ABORT_MARKER
from tests.live import database_url, eventually, free_port

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PROBE = "\ufdfa"
HANDBOOK = "# 员工手册\n\n## 年假\n\n入职满一年的员工每年享有 15 天带薪年假。\n\n## VPN\n\nVPN 空闲 30 分钟后自动断开。\n"


def server_env(settings, media_root, tmp_path) -> dict[str, str]:
    """As an operator would start them: local settings, our database, Milvus and media."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "RAG_", "MILVUS_", "DATABASE_URL"))},
        "DJANGO_SETTINGS_MODULE": "ragsite.settings.local",
        "DJANGO_DEBUG": "false",
        "DATABASE_URL": database_url(),
        "RAGSITE_VAR_DIR": str(tmp_path / "var"),
        "MEDIA_ROOT": str(media_root),
        "MILVUS_URI": settings.MILVUS_URI,
        "MILVUS_COLLECTION_PREFIX": settings.MILVUS_COLLECTION_PREFIX,
        "RAG_EMBEDDING_MODEL": E5_EMBEDDING_MODEL,
        "RAG_EMBEDDING_DIMENSION": str(E5_DIMENSION),
        "RAG_LOCAL_EMBEDDING_ENGINE": "tests.fakes.aborting_e5",
        "RAG_WARM_UP": "false",
        "RAG_OCR_ENABLED": "false",
        "RAG_INGESTION_LEASE_SECONDS": "5",
    }



@contextmanager
def started(command: list[str], env: dict[str, str], log: Path):
    with log.open("w") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            yield process
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def e5_kb(*, slug: str) -> KnowledgeBase:
    return catalog_services.create_knowledge_base(
        slug=slug, name="引擎测试", actor=None, visibility=Visibility.PUBLIC, support_contact="IT 服务台 8000",
        embedding_model=E5_EMBEDDING_MODEL, embedding_dimension=E5_DIMENSION,
    )


def upload(kb: KnowledgeBase, name: str, text: str) -> Document:
    return document_services.upload_documents(kb=kb, files=[SimpleUploadedFile(name, text.encode())], actor=None)[0].document


def engine_deaths(log: Path) -> int:
    return log.read_text(errors="replace").count("e5: child")


def test_daphne_answers_what_used_to_kill_it_and_keeps_serving(milvus, media_root, run_tasks, settings, tmp_path):
    # given: a published e5 knowledge base, and daphne started as its command
    settings.RAG_EMBEDDING_MODEL, settings.RAG_EMBEDDING_DIMENSION = E5_EMBEDDING_MODEL, E5_DIMENSION
    kb = e5_kb(slug="engine-web")
    upload(kb, "员工手册.md", HANDBOOK)
    publish_draft(kb, actor=None)
    port, log = free_port(), tmp_path / "daphne.log"
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "ragsite.asgi:application"]
    with started(command, server_env(settings, media_root, tmp_path), log) as daphne, httpx.Client(
        base_url=f"http://127.0.0.1:{port}", timeout=120
    ) as client:
        assert eventually(lambda: _up(client), within=60), log.read_text()[-2000:]

        # when: the probe's requests
        search = client.post("/api/retrieval/search", json={"knowledge_base_id": kb.slug, "question": PROBE * 20})
        chat = client.post("/api/chat", json={"knowledge_base_id": kb.slug, "question": PROBE * 1500})

        # then: answered, nothing died
        assert search.status_code == 200, search.text
        assert chat.status_code == 200, chat.text
        assert engine_deaths(log) == 0

        # when: twice a question the engine still dies on
        question = f"{ABORT_MARKER}，年假有几天？"
        first = client.post("/api/retrieval/explain", json={"knowledge_base_id": kb.slug, "question": question})
        second = client.post("/api/retrieval/explain", json={"knowledge_base_id": kb.slug, "question": question})

        # then: both answered from the keyword channel, the engine died once, daphne not at all
        for response in (first, second):
            assert response.status_code == 200, response.text
            errors = response.json()["trace"]["channel_errors"]
            assert [(e["channel"], e["error"]) for e in errors] == [("dense:original", "text_unembeddable")]
            assert any("15 天" in hit["content"] for hit in response.json()["results"])
        assert engine_deaths(log) == 1
        assert daphne.poll() is None

        # and: the next question is served with meaning again
        after = client.post("/api/retrieval/explain", json={"knowledge_base_id": kb.slug, "question": "一年能休几天假？"})
        assert after.status_code == 200 and after.json()["trace"]["channel_errors"] == []
    assert daphne.returncode in (0, -15), log.read_text()[-2000:]


def test_the_worker_indexes_what_used_to_kill_it_and_fails_only_what_still_does(
    milvus, media_root, database_tasks, settings, tmp_path
):
    # given: the probe's Markdown file, a file the engine still dies on, and two plain ones
    settings.RAG_EMBEDDING_MODEL, settings.RAG_EMBEDDING_DIMENSION = E5_EMBEDDING_MODEL, E5_DIMENSION
    kb = e5_kb(slug="engine-worker")
    plain = upload(kb, "员工手册.md", HANDBOOK)
    probe = upload(kb, "探测.md", f"# 探测\n\n{PROBE * 30}\n\n这一段之后还有正文：报销需在三十日内提交。\n")
    poison = upload(kb, "毒文件.md", f"# 毒文件\n\n前文正常。\n\n{ABORT_MARKER}\n")
    other = upload(kb, "差旅.md", "# 差旅\n\n一线城市住宿标准 600 元/晚。\n")
    log = tmp_path / "worker.log"

    # when: a real worker works the queue
    with started([sys.executable, "manage.py", "ingestion_worker"], server_env(settings, media_root, tmp_path), log) as worker:
        settled = eventually(
            lambda: not Document.objects.filter(knowledge_base=kb).exclude(
                status__in=[DocumentStatus.READY, DocumentStatus.FAILED]).exists(),
            within=240, every=0.5,
        )
        assert settled, (list(Document.objects.values_list("title", "status")), log.read_text()[-3000:])

        # then: only the file the engine dies on failed, with its own code, after one run
        statuses = {d.pk: (d.status, d.error_code, d.attempts) for d in Document.objects.filter(knowledge_base=kb)}
        assert statuses[plain.pk][0] == statuses[probe.pk][0] == statuses[other.pk][0] == DocumentStatus.READY, statuses
        assert statuses[poison.pk] == (DocumentStatus.FAILED, "text_unembeddable", 1), statuses
        assert worker.poll() is None, log.read_text()[-3000:]

        # and: the worker goes on with the next upload
        later = upload(kb, "会议室.md", "# 会议室\n\n会议室在 OA 系统预订。\n")
        assert eventually(lambda: Document.objects.get(pk=later.pk).status == DocumentStatus.READY, within=120), (
            log.read_text()[-3000:]
        )
        assert worker.poll() is None


def _up(client: httpx.Client) -> bool:
    try:
        return client.get("/api/knowledge-bases/").status_code == 200
    except httpx.TransportError:
        time.sleep(0.2)
        return False
