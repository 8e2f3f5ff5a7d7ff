"""make bench-load: concurrent chat streams and retrieval against daphne + worker + Milvus Lite while
ingestion runs, local provider, loopback only.

Everything runs in a scratch var dir: a Milvus Lite server on a free 127.0.0.1 port, one daphne
process (`ragsite.asgi:application`, as the Procfile's `web`) and one `manage.py ingestion_worker`
(the Procfile's `worker`), SQLite unless `--database-url` names a loopback PostgreSQL server (a
scratch database is created there and dropped at the end). A knowledge base of generated Chinese
documents is uploaded, processed by the worker and published before the load starts.

Phases (each bounded in requests and in seconds; the run stops by itself):

- baseline: one chat client and one retrieval client, the worker idle: the same figures with
  nothing competing inside the application (the summary's reference for the load phase).
- load: `--chat-concurrency` clients stream `POST /api/chat/stream` (AI SDK UI message
  stream) and `--retrieval-concurrency` clients post `/api/retrieval/search`, each asking the next
  question as soon as its previous one is answered, while an uploader keeps adding documents to the
  same knowledge base's draft through `POST /api/knowledge-bases/{id}/documents/` for the worker.
  Reported: requests/s, p50/p95/p99 of the time to the first `text-delta` and to `[DONE]` (streams)
  and of the response time (retrieval), errors by kind with messages, the documents ingested, the
  cores each process used and the RSS of daphne, the worker and Milvus.
- ramp (`--ramp`): the same mix at 1, 2, 4 … `--ramp-max` clients of each kind; every level runs
  until its request budget or its time is spent. It keeps climbing past the latency limits
  (`--limit-first-delta-ms`, `--limit-retrieval-ms`) and stops at the first level with errors,
  reporting what broke (timeouts, 5xx with their code, refused connections, SQLite lock waits in
  the server logs …) with the messages.
- soak (`--soak SECONDS`): constant moderate load (`--soak-concurrency` clients of each kind, a
  trickle of uploads) for that long, the RSS of each process sampled every `--sample-seconds`;
  reported as the series and, leaving out the first tenth (models loading), its growth from start
  to end and its slope in MB/min (flat = within a few % and no steady slope). The LocMem cache
  (`RAG_LOCAL_CACHE_MAX_ENTRIES`, 10,000 entries) fills with every distinct question: part of
  daphne's growth until it is full.

After the phases the uploader stops, the worker drains the queue, the draft is published through
the API and `manage.py check_index` compares the database with Milvus (nothing lost).

Every virtual client signs in with its own token. The abuse limits (per-user and per-IP throttles
on chat and retrieval, streams per user) would cap the load itself: daphne and the worker run with
`THROTTLE_OVERRIDES` (no rate, no stream cap; `throttle` in the results shows what they saw).
The limits are measured on their own afterwards (`throttle_probe`, skipped with
`--throttle-probe 0`): a second daphne with the configured values, one user sending its budget and
a few more requests of each kind, and more streams at once than it may hold.

Everything the run starts is stopped on exit, Ctrl-C and SIGTERM included.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

from .chat import Daphne, ScratchPostgres, _cpu_seconds, _milvus_pid
from .common import (
    ROOT, RESULTS, chunk_text, make_queries, percentile, print_table, setup_django, tear_down, write_results,
)

STREAM_PATH = "/api/chat/stream"
SEARCH_PATH = "/api/retrieval/search"
KB_SLUG = "bench-load"

# Environment of daphne and the worker: production-like, and the per-client abuse limits lifted (an
# empty rate means unlimited), so that they do not pose as capacity. The throttle probe runs a
# second daphne without these overrides to report the limits separately.
THROTTLE_OVERRIDES = {
    "RAG_THROTTLE_CHAT_USER": "",
    "RAG_THROTTLE_CHAT_ANON_IP": "",
    "RAG_THROTTLE_RETRIEVAL_USER": "",
    "RAG_THROTTLE_RETRIEVAL_ANON_IP": "",
    "RAG_MAX_STREAMS_PER_USER": "100000",
    "RAG_MAX_STREAMS_PER_ANON_IP": "100000",
}
LOAD_ENV = {
    "DJANGO_DEBUG": "false",  # no debug pages, no per-query log
    "DJANGO_LOG_LEVEL": "WARNING",
    **THROTTLE_OVERRIDES,
}

# Server log lines worth counting: what a failure looks like from the inside.
LOG_PATTERNS = {
    "database_locked": re.compile(r"database is locked", re.I),
    "operational_error": re.compile(r"OperationalError"),
    "traceback": re.compile(r"^Traceback \(most recent call last\)"),
    "error_line": re.compile(r"\bERROR\b"),
    "too_many_open_files": re.compile(r"Too many open files"),
    "milvus_error": re.compile(r"MilvusException|VectorStoreError|StatusCode\.UNAVAILABLE"),
}


# --- processes ----------------------------------------------------------------------------------


class Worker:
    """`manage.py ingestion_worker` (the Procfile's worker) on the scratch environment."""

    def __init__(self, *, log_path: Path, extra_env: dict[str, str]) -> None:
        self.log_path = log_path
        self.extra_env = extra_env
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 — the child keeps writing to it
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "ingestion_worker"],
            cwd=ROOT, env={**os.environ, **self.extra_env}, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def _tree(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = [pid], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        tree.extend(frontier)
    return tree


def _rss_mb(pid: int | None) -> float | None:
    """Resident memory of `pid` and its descendants, MB; None once it is gone."""
    if pid is None or not Path(f"/proc/{pid}").exists():
        return None
    total_kb = 0
    for member in _tree(pid):
        try:
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
                    break
        except OSError:
            continue
    return round(total_kb / 1024, 1)


class RssSampler:
    """RSS of each named process every `interval` s, in a thread, from the moment it starts."""

    def __init__(self, pids: dict[str, int | None], interval: float) -> None:
        self.pids = pids
        self.interval = interval
        self.database_url = os.environ.get("DATABASE_URL", "")
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        sample = {"t": round(time.monotonic() - self.started, 1),
                  **{name: _rss_mb(pid) for name, pid in self.pids.items()}}
        if self.database_url.startswith("postgres"):
            sample["pg_connections"] = _pg_connections(self.database_url)
        self.samples.append(sample)

    def _run(self) -> None:
        self._sample()
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> RssSampler:
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def summary(self) -> dict:
        return {"interval_seconds": self.interval, "samples": self.samples,
                "growth": {name: rss_growth(self.samples, name) for name in self.pids}}


def _pg_connections(url: str) -> int | None:
    """Connections to the scratch database (None when the server refuses one more)."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5) as connection:
            return connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()").fetchone()[0]
    except psycopg.Error:
        return None


def rss_growth(samples: list[dict], name: str, *, warmup_fraction: float = 0.1) -> dict:
    """Growth of `name`'s RSS over a phase, leaving out its first `warmup_fraction` (a process
    that loads a model on its first task is not growing). Start and end are the medians of up to
    three samples each (one slow GC does not decide); the slope is the least-squares fit of the
    samples after the warm-up, in MB per minute (a cache filling towards its bound bends, a
    leak does not)."""
    points = [(s["t"], s[name]) for s in samples if s.get(name) is not None]
    if not points:
        return {"start_mb": None, "end_mb": None, "max_mb": None, "growth_pct": None, "slope_mb_per_min": None}
    warmup = points[-1][0] * warmup_fraction
    steady = [p for p in points if p[0] >= warmup] or points[-1:]
    values = [v for _t, v in steady]
    span = max(1, min(3, len(values) // 3))
    start = sorted(values[:span])[span // 2]
    end = sorted(values[-span:])[span // 2]
    slope = None
    if len(steady) >= 3:
        mean_t = sum(t for t, _v in steady) / len(steady)
        mean_v = sum(values) / len(values)
        var = sum((t - mean_t) ** 2 for t, _v in steady)
        slope = round(sum((t - mean_t) * (v - mean_v) for t, v in steady) / var * 60, 2) if var else None
    return {"warmup_seconds": round(warmup, 1), "start_mb": start, "end_mb": end,
            "max_mb": max(v for _t, v in points), "first_mb": points[0][1],
            "growth_pct": round((end - start) / start * 100, 1) if start else None, "slope_mb_per_min": slope}


class Cpu:
    """Cores used per process over one phase, and by everything else on the machine (the
    other processes competing for the CPU)."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = {**pids, "client": os.getpid()}

    @staticmethod
    def _machine() -> tuple[float, float]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + fields[4]
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK"), time.monotonic()

    def __enter__(self) -> Cpu:
        self.before = {name: _cpu_seconds(pid) for name, pid in self.pids.items()}
        self.machine_before = self._machine()
        return self

    def __exit__(self, *exc) -> None:
        busy, now = self._machine()
        wall = now - self.machine_before[1]
        self.cores = {name: round((_cpu_seconds(pid) - self.before[name]) / wall, 2) if wall else 0.0
                      for name, pid in self.pids.items()}
        total = (busy - self.machine_before[0]) / wall if wall else 0.0
        self.cores["machine_busy"] = round(total, 2)
        self.cores["other_processes"] = round(max(0.0, total - sum(v for k, v in self.cores.items()
                                                                   if k in self.pids)), 2)


class LogWatch:
    """Counts the interesting lines the server logs gained since the last call, and the
    exceptions their tracebacks end with (the line that says what went wrong)."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths
        self.offsets = {name: 0 for name in paths}

    def delta(self) -> dict:
        found: dict = {}
        for name, path in self.paths.items():
            try:
                with open(path, "rb") as log:
                    log.seek(self.offsets[name])
                    text = log.read().decode(errors="replace")
                    self.offsets[name] = log.tell()
            except OSError:
                continue
            counts, exceptions = Counter(), Counter()
            samples: list[str] = []
            in_traceback = False
            for line in text.splitlines():
                hits = [kind for kind, pattern in LOG_PATTERNS.items() if pattern.search(line)]
                counts.update(hits)
                if hits and len(samples) < 5 and line.strip() not in samples and not line.startswith("Traceback"):
                    samples.append(line.strip()[:300])
                if line.startswith("Traceback"):
                    in_traceback = True
                elif in_traceback and line and not line[0].isspace() and not line.startswith(
                        ("During handling", "The above exception")):
                    exceptions[line.strip()[:300]] += 1
                    in_traceback = False
            if counts:
                found[name] = {"counts": dict(counts), "samples": samples,
                               "exceptions": dict(exceptions.most_common(5))}
        return found


# --- data ---------------------------------------------------------------------------------------


def document_text(rng: random.Random, n: int) -> str:
    """A generated Chinese document of a few paragraphs (the bench-retrieval vocabulary)."""
    paragraphs = [chunk_text(rng) for _ in range(rng.randint(3, 8))]
    return f"负载测试文档 {n}\n\n" + "\n\n".join(paragraphs) + "\n"


class Corpus:
    """Deterministic documents: the published ones (questions come from them) and the ones
    uploaded into the draft during the load."""

    def __init__(self, seed: int = 20251) -> None:
        self.rng = random.Random(seed)
        self.count = 0

    def next_files(self, k: int) -> list[tuple[str, bytes]]:
        files = []
        for _ in range(k):
            self.count += 1
            files.append((f"load-{self.count:06d}.txt", document_text(self.rng, self.count).encode()))
        return files


def question_stream(texts: list[str], seed: int = 31):
    """Endless questions cut from the published documents, seldom repeated (mostly cache misses)."""
    for batch in itertools.count():
        yield from make_queries(texts, 500, seed=seed + batch)


# --- set-up -------------------------------------------------------------------------------------


def create_users(readers: int, *, prefix: str = "bench-load", admin: bool = True) -> tuple[str | None, list[str]]:
    """A superuser's token (uploads, publishing) and one token per virtual reader client."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    User = get_user_model()
    admin_token = None
    if admin:
        user = User.objects.create_superuser(username=f"{prefix}-admin", email="", password=uuid.uuid4().hex)
        admin_token = Token.objects.create(user=user).key
    tokens = []
    for n in range(readers):
        user = User.objects.create_user(username=f"{prefix}-{n}")  # no password: token only
        tokens.append(Token.objects.create(user=user).key)
    return admin_token, tokens


def upload_initial(kb, corpus: Corpus, documents: int) -> tuple[list[int], list[str]]:
    from django.core.files.base import ContentFile

    from knowledge.documents import services as document_services

    files = corpus.next_files(documents)
    outcomes = document_services.upload_documents(kb=kb, files=[ContentFile(data, name=name) for name, data in files],
                                         actor=None, max_files=len(files))
    return [o.document.pk for o in outcomes], [data.decode() for _name, data in files]


def wait_documents(ids: list[int], timeout: float, worker: Worker) -> dict:
    """Until every document ended (ready or failed), the timeout passed or the worker died."""
    from django.db import close_old_connections

    from knowledge.models import Document, DocumentStatus

    ended = {DocumentStatus.READY, DocumentStatus.FAILED}
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    while True:
        close_old_connections()
        statuses = Counter(Document.objects.filter(pk__in=ids).values_list("status", flat=True))
        pending = sum(n for status, n in statuses.items() if status not in ended)
        if not pending or time.monotonic() > deadline or not worker.alive():
            return {"statuses": dict(statuses), "pending": pending, "seconds": round(time.monotonic() - started, 1),
                    "worker_alive": worker.alive()}
        time.sleep(0.5)


def throttle_settings() -> dict:
    """The abuse limits as the bench processes see them (None: unlimited)."""
    from django.conf import settings

    return {
        "rates": dict(settings.REST_FRAMEWORK.get("DEFAULT_THROTTLE_RATES") or {}),
        "limits": {name: getattr(settings, name) for name in dir(settings)
                   if name.startswith("RAG_") and ("THROTTLE" in name or "STREAMS_PER" in name)
                   and name != "RAG_THROTTLE_RATES"},
    }


# --- client -------------------------------------------------------------------------------------


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


def _failure(exc: BaseException, timeout: float) -> tuple[str, str]:
    if isinstance(exc, asyncio.TimeoutError):
        return error_kind(exc), f"no response within {timeout:g} s"
    return error_kind(exc), f"{type(exc).__name__}: {exc}"[:300]


def error_kind(exc: BaseException) -> str:
    import httpx

    if isinstance(exc, (asyncio.TimeoutError, httpx.TimeoutException)):
        return f"timeout ({type(exc).__name__})"
    if isinstance(exc, httpx.ConnectError):
        return "connection_refused" if "refused" in str(exc).lower() else "connect_error"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "connection_closed_mid_response"
    if isinstance(exc, httpx.ReadError):
        return "read_error"
    if isinstance(exc, ValueError):
        return "malformed_response"
    return type(exc).__name__


def _http_error(status: int, body: bytes) -> tuple[str, str]:
    text = body.decode(errors="replace")
    code = ""
    try:
        code = json.loads(text).get("code", "")
    except (ValueError, AttributeError):
        pass
    return f"http_{status}" + (f" ({code})" if code else ""), text[:300]


async def stream_turn(client, token: str, question: str, timeout: float) -> dict:
    """One chat turn over SSE; times to the first text-delta and to [DONE], from sending."""
    record: dict = {"kind": "chat", "error": None, "message": None, "deltas": 0}
    started = time.perf_counter()
    record["at"] = time.monotonic()

    async def consume() -> None:
        async with client.stream("POST", STREAM_PATH, json={"knowledge_base_id": KB_SLUG, "question": question},
                                 headers={"Authorization": f"Token {token}"}) as response:
            record["status"] = response.status_code
            if response.status_code != 200:
                record["error"], record["message"] = _http_error(response.status_code, await response.aread())
                return
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line[6:]
                if payload == "[DONE]":
                    record["total_ms"] = _ms(started)
                    return
                part = json.loads(payload)
                kind = part.get("type")
                if kind == "text-delta":
                    record.setdefault("first_delta_ms", _ms(started))
                    record["deltas"] += 1
                elif kind == "data-answer":
                    data = part.get("data", {})
                    record["route"] = f"{data.get('route')}/{data.get('hit_type')}"
                elif kind == "error":
                    record["error"], record["message"] = "stream_error_part", str(part.get("errorText"))[:300]

    try:
        await asyncio.wait_for(consume(), timeout)
    except Exception as exc:  # every failure is a measured outcome, classified by kind
        record["error"], record["message"] = error_kind(exc), f"{type(exc).__name__}: {exc}"[:300]
        if isinstance(exc, asyncio.TimeoutError):
            record["message"] = f"no [DONE] within {timeout:g} s; " + (
                "no response headers yet" if "status" not in record
                else f"HTTP {record['status']}, " + (
                    "text-deltas had started" if "first_delta_ms" in record else "no text-delta yet"))
    if record["error"] is None and "total_ms" not in record:
        record["error"], record["message"] = "stream_ended_without_done", None
    elif record["error"] is None and "first_delta_ms" not in record:
        record["error"], record["message"] = "no_text_delta", None
    if record["error"] is None:
        record["ok"] = True
    return record


async def search(client, token: str, question: str, timeout: float) -> dict:
    record: dict = {"kind": "retrieval", "error": None, "message": None, "at": time.monotonic()}
    started = time.perf_counter()
    try:
        response = await asyncio.wait_for(client.post(
            SEARCH_PATH, json={"knowledge_base_id": KB_SLUG, "question": question},
            headers={"Authorization": f"Token {token}"}), timeout)
        record["total_ms"] = _ms(started)
        record["status"] = response.status_code
        if response.status_code != 200:
            record["error"], record["message"] = _http_error(response.status_code, response.content)
        else:
            results = response.json()
            if not isinstance(results, list):
                record["error"], record["message"] = "malformed_response", str(results)[:300]
            else:
                record["results"] = len(results)
    except Exception as exc:  # every failure is a measured outcome, classified by kind
        record["error"], record["message"] = _failure(exc, timeout)
    if record["error"] is None:
        record["ok"] = True
    return record


class Uploader:
    """Keeps the worker busy: uploads `batch` documents into the draft whenever fewer than
    `backlog` of its uploads are unfinished, at most every `interval` s, `max_documents` in all."""

    def __init__(self, corpus: Corpus, token: str, *, batch: int, backlog: int, max_documents: int,
                 interval: float) -> None:
        self.corpus = corpus
        self.token = token
        self.batch = batch
        self.backlog = backlog
        self.max_documents = max_documents
        self.interval = interval
        self.ids: list[int] = []
        self.records: list[dict] = []

    @staticmethod
    def _unfinished(ids: list[int]) -> int:
        from django.db import connection

        from knowledge.models import Document, DocumentStatus

        try:
            return Document.objects.filter(pk__in=ids).exclude(
                status__in=[DocumentStatus.READY, DocumentStatus.FAILED]).count()
        finally:
            connection.close()

    async def run(self, client, stop: asyncio.Event, timeout: float) -> None:
        from django.db import DatabaseError

        while not stop.is_set() and len(self.ids) < self.max_documents:
            try:
                unfinished = await asyncio.to_thread(self._unfinished, list(self.ids))
            except DatabaseError as exc:  # the database refused this process too: a symptom, kept
                self.records.append({"kind": "upload", "error": "progress_check_failed", "files": 0,
                                     "message": f"{type(exc).__name__}: {exc}"[:300], "at": time.monotonic()})
                unfinished = self.backlog
            if unfinished < self.backlog:
                files = self.corpus.next_files(min(self.batch, self.max_documents - len(self.ids)))
                record: dict = {"kind": "upload", "error": None, "message": None, "at": time.monotonic(),
                                "files": len(files)}
                started = time.perf_counter()
                try:
                    response = await asyncio.wait_for(client.post(
                        f"/api/knowledge-bases/{KB_SLUG}/documents/",
                        files=[("files", (name, data, "text/plain")) for name, data in files],
                        headers={"Authorization": f"Token {self.token}"}), timeout)
                    record["total_ms"] = _ms(started)
                    record["status"] = response.status_code
                    if response.status_code != 201:
                        record["error"], record["message"] = _http_error(response.status_code, response.content)
                    else:
                        self.ids += [o["document"]["id"] for o in response.json()]
                        record["ok"] = True
                except Exception as exc:  # every failure is a measured outcome, classified by kind
                    record["error"], record["message"] = _failure(exc, timeout)
                self.records.append(record)
            try:
                await asyncio.wait_for(stop.wait(), self.interval)
            except asyncio.TimeoutError:
                pass


def _client(base_url: str, connections: int, timeout: float):
    import httpx

    return httpx.AsyncClient(
        base_url=base_url, timeout=httpx.Timeout(timeout),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        trust_env=False,  # loopback only: never through a proxy from the environment
    )


async def run_mix(base_url: str, *, chat_tokens: list[str], retrieval_tokens: list[str], questions,
                  max_requests: int, max_seconds: float, request_timeout: float, think_seconds: float = 0.0,
                  uploader: Uploader | None = None) -> tuple[list[dict], float]:
    """Closed-loop clients (one per token) until `max_requests` were sent or `max_seconds` passed;
    requests in flight at the deadline are waited for (each within `request_timeout`)."""
    records: list[dict] = []
    sent = 0
    deadline = time.monotonic() + max_seconds
    stop_uploads = asyncio.Event()

    async with _client(base_url, max(1, len(chat_tokens)), request_timeout) as chat_client, \
            _client(base_url, max(1, len(retrieval_tokens)), request_timeout) as search_client, \
            _client(base_url, 2, request_timeout) as upload_client:

        async def client_loop(call, client, token: str) -> None:
            nonlocal sent
            while sent < max_requests and time.monotonic() < deadline:
                sent += 1
                records.append(await call(client, token, next(questions), request_timeout))
                if think_seconds:
                    await asyncio.sleep(think_seconds)

        started = time.perf_counter()
        loops = [asyncio.create_task(client_loop(stream_turn, chat_client, t)) for t in chat_tokens]
        loops += [asyncio.create_task(client_loop(search, search_client, t)) for t in retrieval_tokens]
        feeding = asyncio.create_task(uploader.run(upload_client, stop_uploads, request_timeout)) if uploader else None
        _done, pending = await asyncio.wait(loops, timeout=max_seconds + request_timeout + 5)
        for task in pending:  # cannot happen with per-request timeouts; a bound all the same
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        wall = time.perf_counter() - started
        stop_uploads.set()
        if feeding is not None:
            await feeding
    return records, wall


# --- figures ------------------------------------------------------------------------------------


def _dist(values) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "max": None}
    return {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
            "p99": percentile(values, 99), "max": round(max(values), 2)}


def errors_by_kind(records: list[dict]) -> dict:
    kinds: dict[str, dict] = {}
    for record in records:
        if record["error"] is None:
            continue
        entry = kinds.setdefault(record["error"], {"count": 0, "messages": []})
        entry["count"] += 1
        if record["message"] and record["message"] not in entry["messages"] and len(entry["messages"]) < 3:
            entry["messages"].append(record["message"])
    return kinds


def figures(records: list[dict], wall: float) -> dict:
    out: dict = {"wall_seconds": round(wall, 2)}
    for kind in ("chat", "retrieval", "upload"):
        mine = [r for r in records if r["kind"] == kind]
        ok = [r for r in mine if r.get("ok")]
        block = {
            "requests": len(mine), "ok": len(ok), "errors": len(mine) - len(ok),
            "per_second": round(len(ok) / wall, 2) if wall else 0.0,
            "errors_by_kind": errors_by_kind(mine),
            "total_ms": _dist(r.get("total_ms") for r in ok),
        }
        if kind == "chat":
            block["first_delta_ms"] = _dist(r.get("first_delta_ms") for r in ok)
            block["routes"] = dict(Counter(str(r.get("route")) for r in ok))
        if kind == "upload":
            block["files"] = sum(r["files"] for r in ok)
        out[kind] = block
    return out


def ingestion_progress(ids: list[int]) -> dict:
    from django.db import close_old_connections

    from knowledge.models import Document

    close_old_connections()
    statuses = Counter(Document.objects.filter(pk__in=ids).values_list("status", flat=True))
    return {"uploaded": len(ids), "statuses": dict(statuses)}


# --- phases -------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args, base_url: str, admin_token: str, reader_tokens: list[str], questions, corpus: Corpus,
                 pids: dict, logs: LogWatch) -> None:
        self.args = args
        self.base_url = base_url
        self.admin_token = admin_token
        self.reader_tokens = reader_tokens
        self.questions = questions
        self.corpus = corpus
        self.pids = pids
        self.logs = logs
        self.uploaded: list[int] = []

    def tokens(self, chat: int, retrieval: int) -> tuple[list[str], list[str]]:
        return self.reader_tokens[:chat], self.reader_tokens[chat : chat + retrieval]

    def phase(self, *, chat: int, retrieval: int, max_requests: int, max_seconds: float, request_timeout: float,
              uploader: Uploader | None, sample_seconds: float, think_seconds: float = 0.0) -> dict:
        chat_tokens, retrieval_tokens = self.tokens(chat, retrieval)
        self.logs.delta()
        load_before = os.getloadavg()[0]
        with Cpu(self.pids) as cpu, RssSampler(self.pids, sample_seconds) as rss:
            records, wall = asyncio.run(run_mix(
                self.base_url, chat_tokens=chat_tokens, retrieval_tokens=retrieval_tokens, questions=self.questions,
                max_requests=max_requests, max_seconds=max_seconds, request_timeout=request_timeout,
                think_seconds=think_seconds, uploader=uploader,
            ))
        result = {
            "chat_concurrency": chat, "retrieval_concurrency": retrieval, "max_requests": max_requests,
            "max_seconds": max_seconds, "request_timeout_seconds": request_timeout, "think_seconds": think_seconds,
            **figures(records + (uploader.records if uploader else []), wall),
            "cpu_cores": cpu.cores, "rss": rss.summary(),
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "server_log": self.logs.delta(),
        }
        if self.args.database_url:
            counts = [sample.get("pg_connections") for sample in result["rss"]["samples"]]
            result["pg_connections_max"] = max((c for c in counts if c is not None), default=None)
            result["pg_connections_refused_samples"] = sum(1 for c in counts if c is None)
        if uploader is not None:
            self.uploaded += uploader.ids
            result["ingestion"] = ingestion_progress(uploader.ids)
        return result

    def uploader(self, *, batch: int, backlog: int, max_documents: int, interval: float) -> Uploader:
        return Uploader(self.corpus, self.admin_token, batch=batch, backlog=backlog, max_documents=max_documents,
                        interval=interval)

    def load(self) -> dict:
        a = self.args
        return self.phase(chat=a.chat_concurrency, retrieval=a.retrieval_concurrency, max_requests=a.requests,
                          max_seconds=a.seconds, request_timeout=a.request_timeout, sample_seconds=a.load_sample_seconds,
                          uploader=self.uploader(batch=a.ingest_batch, backlog=a.ingest_backlog,
                                                 max_documents=a.ingest_documents, interval=2.0))

    def ramp(self) -> dict:
        a = self.args
        levels, held, latency_crossed, first_errors = [], None, None, None
        stopped = f"reached --ramp-max {a.ramp_max} without errors"
        for level in levels_up_to(a.ramp_max):
            requests = max(a.ramp_min_requests, a.ramp_factor * level) * 2
            stats = self.phase(chat=level, retrieval=level, max_requests=requests, max_seconds=a.ramp_level_seconds,
                               request_timeout=a.ramp_request_timeout, sample_seconds=a.load_sample_seconds,
                               uploader=self.uploader(batch=a.ingest_batch, backlog=a.ingest_backlog,
                                                      max_documents=a.ramp_ingest_documents, interval=2.0))
            stats["level"] = level
            chat_p95 = stats["chat"]["first_delta_ms"]["p95"]
            search_p95 = stats["retrieval"]["total_ms"]["p95"]
            errors = stats["chat"]["errors"] + stats["retrieval"]["errors"] + stats["upload"]["errors"]
            within = (chat_p95 is not None and chat_p95 <= a.limit_first_delta_ms
                      and search_p95 is not None and search_p95 <= a.limit_retrieval_ms)
            stats["within_latency_limits"] = within
            levels.append(stats)
            print(f"  level {level:>3} (+{level} retrieval): chat {stats['chat']['ok']}/{stats['chat']['requests']}"
                  f" p95 first delta {chat_p95} ms, retrieval {stats['retrieval']['ok']}/{stats['retrieval']['requests']}"
                  f" p95 {search_p95} ms, errors {errors}, server log {_log_counts(stats['server_log'])}"
                  + (f", PostgreSQL connections ≤ {stats['pg_connections_max']}" if "pg_connections_max" in stats else ""),
                  flush=True)
            if not within and latency_crossed is None:
                latency_crossed = {"level": level, "chat_first_delta_p95_ms": chat_p95,
                                   "retrieval_p95_ms": search_p95}
            if errors:
                first_errors = {
                    "level": level,
                    "chat": stats["chat"]["errors_by_kind"], "retrieval": stats["retrieval"]["errors_by_kind"],
                    "upload": stats["upload"]["errors_by_kind"], "server_log": stats["server_log"],
                }
                stopped = f"errors at level {level}"
                break
            if within:
                held = level
        return {
            "limits": {"chat_first_delta_p95_ms": a.limit_first_delta_ms, "retrieval_p95_ms": a.limit_retrieval_ms},
            "capacity_level": held, "latency_limit_crossed": latency_crossed, "first_errors": first_errors,
            "stopped_because": stopped, "levels": levels,
        }

    def soak(self) -> dict:
        a = self.args
        n = a.soak_concurrency
        return self.phase(chat=n, retrieval=n, max_requests=10**9, max_seconds=a.soak, request_timeout=a.request_timeout,
                          sample_seconds=a.sample_seconds, think_seconds=a.soak_think_seconds,
                          uploader=self.uploader(batch=2, backlog=2, max_documents=max(2, int(a.soak // 15)),
                                                 interval=30.0))

    def publish_draft(self, worker: Worker, timeout: float) -> dict:
        """Drain the queue, then publish the draft the load filled, through the API."""
        import httpx

        from knowledge.models import KnowledgeBaseVersion, VersionStatus

        result: dict = {"drain": wait_documents(self.uploaded, timeout, worker) if self.uploaded else None}
        draft = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            draft = KnowledgeBaseVersion.objects.filter(knowledge_base__slug=KB_SLUG).order_by("-number").first()
            if draft is None or draft.status != VersionStatus.BUILDING or not self.uploaded:
                break
            time.sleep(0.5)  # the last worker marks the draft ready just after its commit
        result["draft"] = None if draft is None else {"number": draft.number, "status": draft.status,
                                                      "documents": draft.documents.count()}
        if draft is not None and draft.status == VersionStatus.READY:
            response = httpx.post(
                f"{self.base_url}/api/knowledge-bases/{KB_SLUG}/versions/{draft.number}/activate/",
                json={"reason": "bench-load"}, headers={"Authorization": f"Token {self.admin_token}"},
                timeout=60, trust_env=False)
            result["publish_status"] = response.status_code
            if response.status_code != 200:
                result["publish_error"] = response.text[:300]
        return result


async def _probe_sequence(base_url: str, call, token: str, questions, count: int, timeout: float) -> list[dict]:
    async with _client(base_url, 1, timeout) as client:
        return [await call(client, token, next(questions), timeout) for _ in range(count)]


async def _probe_parallel(base_url: str, token: str, questions, count: int, timeout: float) -> list[dict]:
    async with _client(base_url, count, timeout) as client:
        return await asyncio.gather(*(stream_turn(client, token, next(questions), timeout) for _ in range(count)))


def _refusals(records: list[dict]) -> dict:
    refused = [n for n, r in enumerate(records, 1) if r.get("status") == 429]
    return {
        "requests": len(records), "ok": sum(1 for r in records if r.get("ok")),
        "statuses": dict(Counter(str(r.get("status")) for r in records)),
        "first_refused_at": refused[0] if refused else None, "refused": len(refused),
        "refusal": next((r["message"] for r in records if r.get("status") == 429), None),
        "other_errors": errors_by_kind([r for r in records if r["error"] and r.get("status") != 429]),
    }


def _probe_count(rate: str | None, cap: int) -> int:
    """The configured budget of one window and 5 more (to see the refusals), at most `cap`."""
    try:
        return min(cap, int(str(rate).split("/")[0]) + 5)
    except ValueError:  # no rate: unlimited, `cap` requests show it
        return cap


def throttle_probe(scratch: Path, questions, cap: int, timeout: float) -> dict:
    """A second daphne with the configured limits (no overrides): one fresh user sends its
    per-user chat budget and 5 more turns one after the other, another its retrieval budget and
    5 more (at most `cap` each), a third opens more streams at once than it may. Reports where
    the first 429 came and what it said."""
    from django.conf import settings

    _admin, [chat_token, search_token, parallel_token] = create_users(3, prefix="bench-probe", admin=False)
    saved = {name: os.environ.pop(name) for name in THROTTLE_OVERRIDES if name in os.environ}
    daphne = Daphne(log_path=scratch / "daphne-probe.log", extra_env={})
    try:
        base_url = daphne.start()
        rates = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c",
             "import json; from django.conf import settings as s; print(json.dumps({"
             "'rates': s.REST_FRAMEWORK.get('DEFAULT_THROTTLE_RATES'), "
             "'streams_per_user': getattr(s, 'RAG_MAX_STREAMS_PER_USER', None)}))"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, env=dict(os.environ),
        )
        configured = json.loads(rates.stdout.strip().splitlines()[-1]) if rates.returncode == 0 else {
            "error": rates.stderr[-300:]}
        rates = configured.get("rates") or {}
        started = time.monotonic()
        chat = asyncio.run(_probe_sequence(base_url, stream_turn, chat_token, questions,
                                           _probe_count(rates.get("chat_user"), cap), timeout))
        chat_seconds = time.monotonic() - started
        started = time.monotonic()
        search_records = asyncio.run(_probe_sequence(base_url, search, search_token, questions,
                                                     _probe_count(rates.get("retrieval_user"), cap), timeout))
        search_seconds = time.monotonic() - started
        parallel_count = (configured.get("streams_per_user") or 3) + 2
        parallel = asyncio.run(_probe_parallel(base_url, parallel_token, questions, parallel_count, timeout))
    finally:
        os.environ.update(saved)
        daphne.stop()
    return {
        "configured": configured,
        "note": "fixed windows: a run that crosses a window boundary gets a fresh budget",
        "chat_one_user_sequential": {**_refusals(chat), "seconds": round(chat_seconds, 1)},
        "retrieval_one_user_sequential": {**_refusals(search_records), "seconds": round(search_seconds, 1)},
        "chat_one_user_parallel_streams": _refusals(parallel),
        "load_env_rates": settings.REST_FRAMEWORK.get("DEFAULT_THROTTLE_RATES"),
    }


def levels_up_to(maximum: int) -> list[int]:
    levels, level = [], 1
    while level < maximum:
        levels.append(level)
        level *= 2
    return levels + [maximum]


def check_index() -> dict:
    process = subprocess.run([sys.executable, "manage.py", "check_index", "--kb", KB_SLUG], cwd=ROOT,
                             capture_output=True, text=True, timeout=300, env={**os.environ, **LOAD_ENV})
    return {"returncode": process.returncode, "output": (process.stdout + process.stderr).strip()[-500:]}


# --- report -------------------------------------------------------------------------------------


def _log_counts(server_log: dict) -> str:
    parts = [f"{name}: {', '.join(f'{k} {v}' for k, v in entry['counts'].items())}" for name, entry in server_log.items()]
    return "; ".join(parts) or "clean"


def _trio(block: dict) -> str:
    return f"{block['p50']}/{block['p95']}/{block['p99']}"


def _errors(block: dict) -> str:
    return ", ".join(f"{kind} ×{entry['count']}" for kind, entry in block["errors_by_kind"].items()) or "0"


def phase_rows(name: str, stats: dict) -> list[list]:
    chat, retrieval, upload = stats["chat"], stats["retrieval"], stats["upload"]
    return [[
        name, f"{stats['chat_concurrency']}+{stats['retrieval_concurrency']}", stats["wall_seconds"],
        f"{chat['ok']}/{chat['requests']}", chat["per_second"], _trio(chat["first_delta_ms"]), _trio(chat["total_ms"]),
        f"{retrieval['ok']}/{retrieval['requests']}", retrieval["per_second"], _trio(retrieval["total_ms"]),
        f"{upload['files']} files", _errors(chat) + " | " + _errors(retrieval) + " | " + _errors(upload),
        stats["cpu_cores"].get("daphne"), stats["cpu_cores"].get("worker"), stats["cpu_cores"].get("milvus"),
        stats["cpu_cores"].get("other_processes"),
    ]]


def report(results: dict) -> None:
    rows = []
    for name in ("baseline", "load"):
        if results.get(name):
            rows += phase_rows(name, results[name])
    for level in (results.get("ramp") or {}).get("levels", []):
        rows += phase_rows(f"ramp {level['level']}", level)
    if results.get("soak"):
        rows += phase_rows("soak", results["soak"])
    print(f"\nms p50/p95/p99 ({results['database']}, {results['embedding_model']}); concurrency = chat+retrieval clients:")
    print_table(["phase", "clients", "s", "chat ok", "chat/s", "first delta", "[DONE]", "retr ok", "retr/s",
                 "retrieval", "ingested", "errors chat | retrieval | upload", "cpu daphne", "cpu worker",
                 "cpu milvus", "cpu others"], rows)
    for name in ("load", "soak"):
        stats = results.get(name)
        if not stats:
            continue
        growth = stats["rss"]["growth"]
        print(f"\n{name}: RSS MB after the first {next(iter(growth.values()))['warmup_seconds']} s, start → end "
              "(growth %, slope MB/min, max): " + "; ".join(
                  f"{proc} {g['start_mb']} → {g['end_mb']} ({g['growth_pct']} %, {g['slope_mb_per_min']}, "
                  f"max {g['max_mb']})" for proc, g in growth.items()))
        if name == "soak":
            print("soak RSS series (t s: daphne/worker/milvus MB): " + " ".join(
                f"{s['t']:g}:{s['daphne']}/{s['worker']}/{s['milvus']}" for s in stats["rss"]["samples"]))
        if stats.get("ingestion"):
            print(f"{name}: ingestion during the phase {stats['ingestion']}")
        print(f"{name}: server log {_log_counts(stats['server_log'])}")
    ramp = results.get("ramp")
    if ramp:
        print(f"\nramp: capacity (no errors, within limits) {ramp['capacity_level']} clients of each kind; "
              f"latency limit first crossed {ramp['latency_limit_crossed']}; stopped: {ramp['stopped_because']}")
        if ramp["first_errors"]:
            print("first errors: " + json.dumps(ramp["first_errors"], ensure_ascii=False)[:2000])
    probe = results.get("throttle_probe")
    if probe:
        print(f"\nthrottle probe (configured {probe['configured']}):")
        for name in ("chat_one_user_sequential", "retrieval_one_user_sequential", "chat_one_user_parallel_streams"):
            block = probe[name]
            print(f"  {name}: {block['ok']}/{block['requests']} ok, statuses {block['statuses']}, first 429 at "
                  f"#{block['first_refused_at']}: {block['refusal']}")
    final = results.get("final") or {}
    print(f"\nafter the load: {json.dumps(final, ensure_ascii=False)[:1500]}")


# --- main ---------------------------------------------------------------------------------------


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="tiny bounds for a smoke run (hashing embedder, a few documents and requests)")
    parser.add_argument("--embedding-model", default=None,
                        help="embedder of the knowledge base (default local-e5-small-v1, quick: local-hash-lexical-v1)")
    parser.add_argument("--documents", type=int, default=None, help="published documents before the load (default 40)")
    parser.add_argument("--chat-concurrency", type=int, default=4, help="concurrent chat streams in the load phase")
    parser.add_argument("--retrieval-concurrency", type=int, default=4, help="concurrent retrieval clients")
    parser.add_argument("--requests", type=int, default=None, help="load phase: requests in all (default 600)")
    parser.add_argument("--seconds", type=float, default=None, help="load phase: at most this long (default 120)")
    parser.add_argument("--baseline-requests", type=int, default=None,
                        help="requests of the one-client baseline before the load (default 40, quick 8)")
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument("--ingest-documents", type=int, default=None,
                        help="load phase: documents uploaded into the draft meanwhile (default 40)")
    parser.add_argument("--ingest-batch", type=int, default=5, help="documents per upload")
    parser.add_argument("--ingest-backlog", type=int, default=10, help="upload again when fewer are unfinished")
    parser.add_argument("--worker-embedding-threads", type=int, default=1,
                        help="RAG_LOCAL_EMBEDDING_THREADS of the worker (0: every core; 1 leaves a core to serving)")
    parser.add_argument("--load-sample-seconds", type=float, default=5.0, help="RSS sampling in load and ramp")
    parser.add_argument("--ramp", action="store_true", help="also ramp the concurrency until errors appear")
    parser.add_argument("--skip-load", action="store_true", help="no baseline and load phases: only ramp and/or soak")
    parser.add_argument("--ramp-max", type=int, default=128, help="highest ramp level (clients of each kind)")
    parser.add_argument("--ramp-factor", type=int, default=4, help="requests of each kind per level = factor × level …")
    parser.add_argument("--ramp-min-requests", type=int, default=16, help="… but at least this many")
    parser.add_argument("--ramp-level-seconds", type=float, default=90.0, help="at most this long per level")
    parser.add_argument("--ramp-request-timeout", type=float, default=30.0,
                        help="a request slower than this counts as a timeout error in the ramp")
    parser.add_argument("--ramp-ingest-documents", type=int, default=20, help="documents uploaded per ramp level")
    parser.add_argument("--limit-first-delta-ms", type=float, default=3000.0,
                        help="ramp: p95 time to the first text-delta a level must hold")
    parser.add_argument("--limit-retrieval-ms", type=float, default=1000.0, help="ramp: p95 retrieval a level must hold")
    parser.add_argument("--soak", type=float, default=0.0, help="also soak for this many seconds (e.g. 600)")
    parser.add_argument("--soak-concurrency", type=int, default=2, help="soak: clients of each kind")
    parser.add_argument("--soak-think-seconds", type=float, default=0.5, help="soak: pause of each client between requests")
    parser.add_argument("--sample-seconds", type=float, default=10.0, help="soak: RSS sampling interval")
    parser.add_argument("--drain-timeout", type=float, default=None,
                        help="after the phases: wait this long for the worker to finish the uploads (default 600)")
    parser.add_argument("--throttle-probe", type=int, default=None,
                        help="at most this many requests of each kind one user sends to a daphne with the "
                        "configured limits (default 100; quick: 0 = no probe)")
    parser.add_argument("--database-url", default=None,
                        help="PostgreSQL server to use instead of SQLite, e.g. postgres://postgres@127.0.0.1:5432/postgres "
                             "(a scratch database is created there and dropped at the end)")
    parser.add_argument("--output", type=Path, default=None, help=f"results file (default {RESULTS}/load.json)")
    parser.add_argument("--keep-scratch", action="store_true", help="keep the scratch var dir (logs, SQLite)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.embedding_model = args.embedding_model or ("local-hash-lexical-v1" if quick else "local-e5-small-v1")
    args.documents = args.documents or (6 if quick else 40)
    args.requests = args.requests or (24 if quick else 600)
    args.baseline_requests = args.baseline_requests or (8 if quick else 40)
    args.seconds = args.seconds or (20.0 if quick else 120.0)
    args.ingest_documents = args.ingest_documents if args.ingest_documents is not None else (4 if quick else 40)
    args.drain_timeout = args.drain_timeout or (60.0 if quick else 600.0)
    if args.throttle_probe is None:
        args.throttle_probe = 0 if quick else 100
    if quick:
        args.chat_concurrency = min(args.chat_concurrency, 2)
        args.retrieval_concurrency = min(args.retrieval_concurrency, 2)
        args.ingest_batch = min(args.ingest_batch, 2)
    for name in ("chat_concurrency", "retrieval_concurrency", "ramp_max", "soak_concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    # Each process keeps its own cache (LocMem), as in `make run`; a developer's Redis is not ours.
    os.environ.pop("REDIS_URL", None)
    for name, value in LOAD_ENV.items():
        os.environ[name] = value
    postgres = ScratchPostgres(args.database_url) if args.database_url else None
    if postgres is not None:
        os.environ["DATABASE_URL"] = postgres.create()
    else:
        os.environ.pop("DATABASE_URL", None)
    stop_milvus = daphne = worker = scratch = None
    caller_var_dir = os.environ.get("RAGSITE_VAR_DIR")
    started = time.perf_counter()
    load_start = os.getloadavg()
    try:
        stop_milvus = setup_django()
        scratch = Path(os.environ["RAGSITE_VAR_DIR"])
        from django.conf import settings

        from knowledge.catalog import services as catalog_services

        database = "postgresql" if postgres else "sqlite"
        readers = max(args.chat_concurrency + args.retrieval_concurrency, 2 * args.soak_concurrency,
                      2 * args.ramp_max if args.ramp else 0)
        admin_token, reader_tokens = create_users(readers)
        kb = catalog_services.create_knowledge_base(slug=KB_SLUG, name="负载测试", visibility="internal", actor=None,
                                            embedding_model=args.embedding_model)
        corpus = Corpus()
        build_started = time.perf_counter()
        initial_ids, texts = upload_initial(kb, corpus, args.documents)
        print(f"building {args.documents} documents ({args.embedding_model}, {database}) …", flush=True)
        from knowledge.documents.bulk import process_queue_until_done, publish_when_ready
        from knowledge.models import Chunk, Document

        # The build is set-up, not a figure: this process runs the queue on every core (as
        # `manage.py ingest --wait` does); the worker, which leaves a core to serving, starts after.
        process_queue_until_done(initial_ids, timeout=args.drain_timeout)
        statuses = Counter(Document.objects.filter(pk__in=initial_ids).values_list("status", flat=True))
        if set(statuses) != {"ready"}:
            raise SystemExit(f"the knowledge base did not build: {dict(statuses)}")
        if publish_when_ready(kb=kb, reason="bench-load") is None:
            raise SystemExit("the built version is not ready")
        build = {"documents": args.documents, "chunks": Chunk.objects.filter(knowledge_base=kb).count(),
                 "seconds": round(time.perf_counter() - build_started, 1)}

        worker = Worker(log_path=scratch / "worker.log",
                        extra_env={"RAG_LOCAL_EMBEDDING_THREADS": str(args.worker_embedding_threads)})
        worker.start()
        daphne = Daphne(log_path=scratch / "daphne.log", extra_env={})
        base_url = daphne.start()
        print(f"daphne on {base_url}, worker pid {worker.pid}", flush=True)
        pids = {"daphne": daphne.pid, "worker": worker.pid, "milvus": _milvus_pid()}
        logs = LogWatch({"daphne": scratch / "daphne.log", "worker": scratch / "worker.log"})
        questions = question_stream(texts)
        bench = Bench(args, base_url, admin_token, reader_tokens, questions, corpus, pids, logs)
        # Warm-up, not measured: jieba, the embedder, the Milvus collections, every connection.
        bench.phase(chat=2, retrieval=2, max_requests=8, max_seconds=60, request_timeout=args.request_timeout,
                    uploader=None, sample_seconds=60)

        results: dict = {
            "provider": settings.RAG_PROVIDER, "database": database, "embedding_model": args.embedding_model,
            "quick": args.quick, "loopback": base_url,
            "settings": {"RAG_CHAT_THREADS": settings.RAG_CHAT_THREADS,
                         "RAG_RETRIEVAL_THREADS": settings.RAG_RETRIEVAL_THREADS,
                         "worker RAG_LOCAL_EMBEDDING_THREADS": args.worker_embedding_threads,
                         "DEBUG": settings.DEBUG, "auth": "one token per virtual client"},
            "throttle": throttle_settings(), "bench_env": LOAD_ENV, "build": build,
        }
        if not args.skip_load:
            print(f"baseline: one chat stream + one retrieval client, idle worker, {args.baseline_requests} requests …",
                  flush=True)
            results["baseline"] = bench.phase(
                chat=1, retrieval=1, max_requests=args.baseline_requests, max_seconds=args.seconds,
                request_timeout=args.request_timeout, uploader=None, sample_seconds=args.load_sample_seconds)
            print(f"load: {args.chat_concurrency} chat streams + {args.retrieval_concurrency} retrieval clients, "
                  f"≤ {args.requests} requests, ≤ {args.seconds:g} s, {args.ingest_documents} documents uploaded …",
                  flush=True)
            results["load"] = bench.load()
        if args.ramp:
            print("ramp …", flush=True)
            results["ramp"] = bench.ramp()
        if args.soak:
            print(f"soak: {args.soak:g} s at {args.soak_concurrency}+{args.soak_concurrency} clients …", flush=True)
            results["soak"] = bench.soak()
        if args.throttle_probe:
            print("throttle probe: one user at a time against the configured limits …", flush=True)
            results["throttle_probe"] = throttle_probe(scratch, questions, args.throttle_probe, args.request_timeout)
        print("draining the ingestion queue and publishing the draft …", flush=True)
        results["final"] = {**bench.publish_draft(worker, args.drain_timeout), "check_index": check_index(),
                            "worker_alive": worker.alive(), "daphne_alive": daphne.process.poll() is None}
        results["load_average"] = {"start": [round(x, 2) for x in load_start],
                                   "end": [round(x, 2) for x in os.getloadavg()]}
        results["seconds"] = round(time.perf_counter() - started, 1)
        report(results)
        path = write_results("load", results, path=args.output)
        print(f"\nwrote {path} ({results['seconds']} s; load average {results['load_average']['start']} → "
              f"{results['load_average']['end']}; other processes share this machine)")
    finally:
        if scratch is None and os.environ.get("RAGSITE_VAR_DIR") != caller_var_dir:
            scratch = Path(os.environ["RAGSITE_VAR_DIR"])  # setup_django made it, then failed
        tear_down(processes=[daphne, worker], stop_milvus=stop_milvus, postgres=postgres, scratch=scratch,
                  keep_scratch=args.keep_scratch)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("\ninterrupted: daphne, the worker, Milvus Lite and the scratch data are gone", file=sys.stderr)
        sys.exit(130)
