"""Fixtures for the fault suite: real components that a test can break and bring back.

- `killable_milvus`: a Milvus Lite server of the test's own (the session's shared one must keep
  serving the rest of the suite), with `kill()` (SIGKILL, as a crash) and `restart()` (same
  file, same port: the app's cached client must find it again by itself).
- `faults_kb`: the chat tests' published knowledge base (real ingestion) on the session's
  Milvus; `killable_kb`: the same on `killable_milvus`.
- The chat fixtures (`provider_server`, `openai_provider`) are re-exported from tests/chat.

A worker killed mid-ingestion is covered by tests/knowledge/test_worker_kill.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.management.commands.milvus_server import LiteServer
from tests.chat.conftest import publish_kb
from tests.live import free_port



class KillableMilvus:
    def __init__(self, directory: Path) -> None:
        self.db_file = directory / "faults.db"
        self.address = f"127.0.0.1:{free_port()}"
        self._server: LiteServer | None = None

    @property
    def uri(self) -> str:
        return f"http://{self.address}"

    def start(self) -> KillableMilvus:
        self._server = LiteServer(db_file=self.db_file, address=self.address)
        self._server.start(ready_timeout=60)
        return self

    def kill(self) -> None:
        """SIGKILL the server process: no goodbye to connected clients, as in a crash."""
        server, self._server = self._server, None
        process = server._process()
        process.kill()
        process.wait(timeout=10)
        server.stop()  # releases the file lock the parent holds

    def restart(self) -> None:
        self.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


@pytest.fixture
def killable_milvus(settings, tmp_path):
    from engines.milvus_store import reset_vector_store_cache

    server = KillableMilvus(tmp_path).start()
    settings.MILVUS_URI = server.uri
    settings.MILVUS_COLLECTION_PREFIX = "faults"
    reset_vector_store_cache()
    yield server
    reset_vector_store_cache()
    server.stop()


@pytest.fixture
def faults_kb(milvus, run_tasks, media_root, staff_user):
    return publish_kb(actor=staff_user)


@pytest.fixture
def killable_kb(killable_milvus, run_tasks, media_root, staff_user):
    return publish_kb(actor=staff_user)
