"""A fake SearXNG on 127.0.0.1: `GET /search?q=…&format=json` answers `{"results": [...]}` as
SearXNG's JSON API does, so the HTTP adapter is tested against a real socket.

By default it answers `RESULTS`; a test queues behaviours with `enqueue(...)` (each used once,
in order). Every request's query parameters and Authorization header are recorded.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.ports import LoopbackHTTPServer

RESULTS: tuple[dict[str, Any], ...] = (
    {"title": "星河X3 保修政策说明", "url": "https://support.example.com/x3/warranty", "engine": "bing",
     "content": "星河X3 的整机保修期为 24 个月，保修期内免费维修。", "parsed_url": ["https", "support.example.com"]},
    {"title": "星河X3 评测", "url": "https://reviews.example.org/xinghe-x3", "engine": "google",
     "content": "星河X3 是一款 Wi-Fi 6 路由器，覆盖面积约 120 平方米。"},
)


@dataclass(frozen=True)
class Results:
    results: tuple[dict[str, Any], ...] = RESULTS


@dataclass(frozen=True)
class Status:
    """This status with a body that must never reach an error message."""

    status: int
    body: str = '{"error": "invalid key sk-leaky-secret for query"}'


@dataclass(frozen=True)
class NotJson:
    body: str = "<html><body>Too many requests</body></html>"


@dataclass(frozen=True)
class Slow:
    seconds: float
    then: Any = None


@dataclass(frozen=True)
class Recorded:
    path: str
    params: dict[str, list[str]]
    authorization: str


class FakeSearxngServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._queue: deque = deque()
        self._lock = threading.Lock()
        self._server: LoopbackHTTPServer | None = None

    def start(self) -> FakeSearxngServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = LoopbackHTTPServer(handler, name="fake-searxng", quiet=True)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        return f"{self._server.base_url}/search"

    def enqueue(self, *behaviours: Any) -> None:
        with self._lock:
            self._queue.extend(behaviours)

    def _next(self, record: Recorded) -> Any:
        with self._lock:
            self.requests.append(record)
            return self._queue.popleft() if self._queue else None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeSearxngServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        behaviour = self.fake._next(Recorded(parts.path, parse_qs(parts.query), self.headers.get("Authorization", "")))
        self._behave(behaviour)

    def _behave(self, behaviour: Any) -> None:
        if isinstance(behaviour, Slow):
            time.sleep(behaviour.seconds)
            self._behave(behaviour.then)
            return
        if isinstance(behaviour, Status):
            self._send(behaviour.status, behaviour.body.encode(), "application/json")
            return
        if isinstance(behaviour, NotJson):
            self._send(200, behaviour.body.encode(), "text/html")
            return
        results = behaviour.results if isinstance(behaviour, Results) else RESULTS
        body = {"query": "…", "number_of_results": len(results), "results": list(results)}
        self._send(200, json.dumps(body, ensure_ascii=False).encode(), "application/json")

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            return
