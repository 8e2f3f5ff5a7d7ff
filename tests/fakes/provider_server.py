"""A fake model provider on 127.0.0.1 that speaks the DashScope and OpenAI wire formats.

The adapters are tested through their real SDKs pointed at this server, so what is checked is
what would go over the wire. Each route answers with a deterministic default (embeddings from a
hash of the text, rerank scores from character overlap, a fixed chat answer) unless a test
queued behaviours for it with `enqueue(route, ...)`; queued behaviours are used once each, in
order. Every request is recorded (path, headers with the Authorization value redacted, JSON).

Routes (names used by `enqueue` and `requests`):

=====================  =====================================================================
dashscope.embeddings   POST /api/v1/services/embeddings/text-embedding/text-embedding
dashscope.rerank       POST /api/v1/services/rerank/text-rerank/text-rerank
dashscope.generation   POST /api/v1/services/aigc/text-generation/generation (SSE when the
                       request has ``X-DashScope-SSE: enable``)
dashscope.multimodal   POST /api/v1/services/aigc/multimodal-generation/generation
openai.embeddings      POST /v1/embeddings
openai.chat            POST /v1/chat/completions (SSE when the body has ``"stream": true``)
openai.rerank          POST /v1/rerank and POST /rerank
=====================  =====================================================================
"""

from __future__ import annotations

import hashlib
import itertools
import json
import socket
import sys
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

ROUTES = {
    "/api/v1/services/embeddings/text-embedding/text-embedding": "dashscope.embeddings",
    "/api/v1/services/rerank/text-rerank/text-rerank": "dashscope.rerank",
    "/api/v1/services/aigc/text-generation/generation": "dashscope.generation",
    "/api/v1/services/aigc/multimodal-generation/generation": "dashscope.multimodal",
    "/v1/embeddings": "openai.embeddings",
    "/v1/chat/completions": "openai.chat",
    "/v1/rerank": "openai.rerank",
    "/rerank": "openai.rerank",
}

DEFAULT_ANSWER = "这是模拟服务返回的回答。"

# --- behaviours ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """Exactly this status, body and content type."""

    status: int = 200
    json_body: Any = None
    raw: bytes | None = None
    content_type: str = "application/json"


@dataclass(frozen=True)
class Fail:
    """An error in the route's wire format."""

    status: int
    code: str = ""
    message: str = "fake failure"


@dataclass(frozen=True)
class Malformed:
    """200 with a JSON content type and a body that is not JSON."""


@dataclass(frozen=True)
class Slow:
    """Wait, then behave as `then` (or the default)."""

    seconds: float
    then: Any = None


@dataclass(frozen=True)
class Held:
    """Answer nothing until the test sets `released` (or the server stops), then behave as
    `then`: a fault injected while the product waits on this call lands in that wait however
    slow the machine is, where a fixed delay races it."""

    released: threading.Event
    then: Any = None
    most: float = 60.0  # seconds: a test that forgets to release does not hang the suite


@dataclass(frozen=True)
class RerankResults:
    """These results (list of {"index", "relevance_score"}), wrapped in the route's format."""

    results: list[dict[str, Any]]


@dataclass(frozen=True)
class Embeddings:
    """Default embeddings, with a forced dimension and/or a transformation of the item list."""

    dimension: int | None = None
    drop_last: bool = False
    reverse: bool = False
    duplicate_first: bool = False


@dataclass(frozen=True)
class Answer:
    """A chat / generation answer. Streams are `deltas` (default: the text in 3-char pieces),
    `delay` seconds apart; `first_delay` seconds between the response headers and the first
    delta (a slow first token); `error_after` sends an error event after that many deltas;
    `finish=False` ends the stream without a finish reason; `cut_after` drops the connection
    after that many deltas, mid-body (no last chunk: a truncated stream)."""

    text: str = DEFAULT_ANSWER
    deltas: tuple[str, ...] | None = None
    delay: float = 0.0
    first_delay: float = 0.0
    error_after: int | None = None
    finish: bool = True
    cut_after: int | None = None

    def pieces(self) -> list[str]:
        if self.deltas is not None:
            return list(self.deltas)
        return [self.text[i : i + 3] for i in range(0, len(self.text), 3)]


# --- records ------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    route: str
    path: str
    headers: dict[str, str]  # Authorization redacted
    authorization: str | None  # the raw header, for asserting which key was sent
    body: Any


@dataclass
class StreamLog:
    route: str
    planned: int
    sent: int = 0
    aborted: bool = False
    done: threading.Event = field(default_factory=threading.Event)


def fake_vector(text: str, dimension: int) -> list[float]:
    seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
    vector = np.random.default_rng(seed).standard_normal(dimension)
    return (vector / np.linalg.norm(vector)).round(8).tolist()


def overlap_score(query: str, document: str) -> float:
    wanted = set(query)
    return round(len(wanted & set(document)) / len(wanted), 6) if wanted else 0.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients drop idle keep-alive connections and abandon timed-out or closed streams;
        # that is the behaviour under test, not a server failure.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FakeProviderServer:
    def __init__(self) -> None:
        self._queues: dict[str, deque[Any]] = defaultdict(deque)
        self._records: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.streams: list[StreamLog] = []
        # Chat streams open at once: now, and the most there ever were.
        self.open_streams = 0
        self.max_open_streams = 0
        self.stopping = threading.Event()
        self.dashscope_dimension = 1024  # when a request names none
        self.openai_dimension = 1536
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --

    def start(self) -> FakeProviderServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        httpd = _Server(("127.0.0.1", 0), handler)
        self._httpd = httpd
        # A short poll interval keeps shutdown (once per test) fast.
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-provider",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def dashscope_base_url(self) -> str:
        return f"{self.url}/api/v1"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    # -- scripting and inspection --

    def enqueue(self, route: str, *behaviours: Any) -> None:
        if route not in set(ROUTES.values()):
            raise ValueError(f"unknown route {route}")
        with self._lock:
            self._queues[route].extend(behaviours)

    def requests(self, route: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self._records if route is None or r.route == route]

    def _next_behaviour(self, route: str) -> Any:
        with self._lock:
            queue = self._queues[route]
            return queue.popleft() if queue else None

    def _record(self, record: RecordedRequest) -> None:
        with self._lock:
            self._records.append(record)

    def stream_opened(self) -> None:
        with self._lock:
            self.open_streams += 1
            self.max_open_streams = max(self.max_open_streams, self.open_streams)

    def stream_closed(self) -> None:
        with self._lock:
            self.open_streams -= 1

    def request_id(self) -> str:
        return f"fake-{next(self._ids)}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeProviderServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    # -- plumbing --

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        route = ROUTES.get(path)
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = None
        headers = {k: v for k, v in self.headers.items()}
        authorization = None
        for name in list(headers):
            if name.lower() == "authorization":
                authorization = headers[name]
                headers[name] = "Bearer ***"
        self.fake._record(RecordedRequest(route or "unknown", path, headers, authorization, body))
        if route is None:
            self._send_json(404, {"error": {"message": "no such route"}})
            return
        self._behave(route, body or {}, self.fake._next_behaviour(route))

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("X-Request-Id", self.fake.request_id())
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except OSError:  # the client gave up (timeout test): nothing to answer to
            self.close_connection = True

    def _send_json(self, status: int, body: Any) -> None:
        self._send(status, json.dumps(body, ensure_ascii=False).encode("utf-8"), "application/json")

    # -- behaviours --

    def _behave(self, route: str, body: dict[str, Any], behaviour: Any) -> None:
        provider = route.split(".", 1)[0]
        if isinstance(behaviour, Slow):
            if self.fake.stopping.wait(behaviour.seconds):
                return
            behaviour = behaviour.then
        if isinstance(behaviour, Held):
            deadline = time.monotonic() + behaviour.most
            while not behaviour.released.wait(0.05):
                if self.fake.stopping.is_set() or time.monotonic() > deadline:
                    return
            behaviour = behaviour.then
        if isinstance(behaviour, Reply):
            payload = behaviour.raw
            if payload is None:
                payload = json.dumps(behaviour.json_body, ensure_ascii=False).encode("utf-8")
            self._send(behaviour.status, payload, behaviour.content_type)
        elif isinstance(behaviour, Fail):
            self._send_json(behaviour.status, self._error_body(provider, behaviour))
        elif isinstance(behaviour, Malformed):
            self._send(200, b'{"output": {"embeddings": [', "application/json")
        elif isinstance(behaviour, RerankResults):
            self._send_json(200, self._rerank_body(provider, behaviour.results))
        elif route.endswith("embeddings"):
            self._embeddings(
                provider, body, behaviour if isinstance(behaviour, Embeddings) else Embeddings()
            )
        elif route.endswith("rerank"):
            self._rerank(provider, body)
        else:
            answer = behaviour if isinstance(behaviour, Answer) else Answer()
            self._generation(route, body, answer)

    def _error_body(self, provider: str, fail: Fail) -> dict[str, Any]:
        if provider == "dashscope":
            return {
                "code": fail.code or "InternalError",
                "message": fail.message,
                "request_id": self.fake.request_id(),
            }
        return {"error": {"message": fail.message, "type": "fake_error", "code": fail.code or None}}

    def _embeddings(self, provider: str, body: dict[str, Any], how: Embeddings) -> None:
        if provider == "dashscope":
            texts = body.get("input", {}).get("texts", [])
            dimension = body.get("parameters", {}).get("dimension") or self.fake.dashscope_dimension
        else:
            texts = body.get("input", [])
            texts = [texts] if isinstance(texts, str) else texts
            dimension = body.get("dimensions") or self.fake.openai_dimension
        dimension = how.dimension or dimension
        items = [(i, fake_vector(text, dimension)) for i, text in enumerate(texts)]
        if how.drop_last:
            items = items[:-1]
        if how.reverse:
            items = items[::-1]
        if how.duplicate_first and items:
            items = [items[0], *items]
        if provider == "dashscope":
            self._send_json(
                200,
                {
                    "output": {"embeddings": [{"text_index": i, "embedding": v} for i, v in items]},
                    "usage": {"total_tokens": sum(len(t) for t in texts)},
                    "request_id": self.fake.request_id(),
                },
            )
        else:
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in items],
                    "model": body.get("model"),
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                },
            )

    def _rerank(self, provider: str, body: dict[str, Any]) -> None:
        if provider == "dashscope":
            query = body.get("input", {}).get("query", "")
            documents = body.get("input", {}).get("documents", [])
            top_n = body.get("parameters", {}).get("top_n") or len(documents)
        else:
            query = body.get("query", "")
            documents = body.get("documents", [])
            top_n = body.get("top_n") or len(documents)
        scored = sorted(
            (
                {"index": i, "relevance_score": overlap_score(query, d)}
                for i, d in enumerate(documents)
            ),
            key=lambda r: (-r["relevance_score"], r["index"]),
        )
        self._send_json(200, self._rerank_body(provider, scored[:top_n]))

    def _rerank_body(self, provider: str, results: list[dict[str, Any]]) -> dict[str, Any]:
        if provider == "dashscope":
            return {
                "output": {"results": results},
                "usage": {"total_tokens": 1},
                "request_id": self.fake.request_id(),
            }
        return {"id": self.fake.request_id(), "results": results, "usage": {"total_tokens": 1}}

    def _generation(self, route: str, body: dict[str, Any], answer: Answer) -> None:
        if route.startswith("dashscope"):
            streaming = self.headers.get("X-DashScope-SSE") == "enable"
        else:
            streaming = body.get("stream") is True
        if not streaming:
            self._send_json(200, self._complete_body(route, answer.text))
            return
        pieces = answer.pieces()
        log = StreamLog(route=route, planned=len(pieces))
        self.fake.streams.append(log)
        self.fake.stream_opened()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream;charset=UTF-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self.wfile.flush()
            if answer.first_delay and self.fake.stopping.wait(answer.first_delay):
                return
            for number, piece in enumerate(pieces):
                if answer.error_after is not None and number == answer.error_after:
                    self._chunk(self._stream_error(route))
                    break
                if answer.cut_after is not None and number == answer.cut_after:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                last = number == len(pieces) - 1
                self._chunk(
                    self._stream_event(route, piece, finish=last and answer.finish, number=number)
                )
                log.sent += 1
                if answer.delay and self.fake.stopping.wait(answer.delay):
                    break
            else:
                if route.startswith("openai"):
                    self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            log.aborted = True
            self.close_connection = True
        finally:
            self.fake.stream_closed()
            log.done.set()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode("ascii") + data + b"\r\n")
        self.wfile.flush()

    def _complete_body(self, route: str, text: str) -> dict[str, Any]:
        if route == "dashscope.generation":
            return {
                "output": {
                    "choices": [
                        {"finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                    ]
                },
                "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
                "request_id": self.fake.request_id(),
            }
        if route == "dashscope.multimodal":
            return {
                "output": {
                    "choices": [
                        {
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": [{"text": text}]},
                        }
                    ]
                },
                "usage": {"input_tokens": 1, "output_tokens": 1},
                "request_id": self.fake.request_id(),
            }
        return {
            "id": self.fake.request_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def _stream_event(self, route: str, piece: str, *, finish: bool, number: int) -> bytes:
        if route.startswith("dashscope"):
            data = {
                "output": {
                    "choices": [
                        {
                            "message": {"role": "assistant", "content": piece},
                            "finish_reason": "stop" if finish else "null",
                        }
                    ]
                },
                "usage": {"input_tokens": 1, "output_tokens": number + 1},
                "request_id": self.fake.request_id(),
            }
            payload = json.dumps(data, ensure_ascii=False)
            return f"id:{number + 1}\nevent:result\n:HTTP_STATUS/200\ndata:{payload}\n\n".encode()
        data = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": piece},
                    "finish_reason": "stop" if finish else None,
                }
            ],
        }
        return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

    def _stream_error(self, route: str) -> bytes:
        if route.startswith("dashscope"):
            payload = json.dumps({"code": "InternalError", "message": "fake stream failure"})
            return f"id:err\nevent:error\n:HTTP_STATUS/500\ndata:{payload}\n\n".encode()
        payload = json.dumps({"error": {"message": "fake stream failure", "type": "server_error"}})
        return f"data: {payload}\n\n".encode()
