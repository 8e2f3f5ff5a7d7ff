"""make bench-chat: streamed answers over SSE, local provider, on one real daphne process.

Two knowledge bases are built in a scratch var dir: the demo (with `manage.py bootstrap`'s own
builder: every format, OCR, FAQs) and a synthetic one of ~10k chunks (the same generator as
bench-retrieval). One daphne process serves `ragsite.asgi:application` on 127.0.0.1 against the
same database and the same Milvus Lite server as this process.

Per knowledge base, one question at a time, an httpx client posts to `/api/chat/stream` and times
the response headers, the `data-retrieval` part, the first `text-delta` and `[DONE]`: first on
questions the server has not seen (L2 cache misses), then the same questions again (hits). The
bare `RetrievalService.retrieve` is timed in this process on the same questions with the options
a chat turn uses (the rules file's plan: hybrid, top-k 5, parent expansion, no rerank with the
local provider), so the chat overhead shows as a ratio. The server's own stage timings are read
back from the stored `QueryTrace` rows.

Then the number of concurrent streams is ramped (1, 2, 4 … `--max-concurrency`), each level a
fixed number of distinct questions, until the p95 time to the first delta passes the limit (1 s)
or any request fails; the last level held is reported with its latency and answers/s. While a
level runs, a probe in this process times a one-row write transaction every 50 ms: with SQLite
every turn's writes take the database's single write lock, so a growing probe wait shows the
writes queueing behind each other (compare a run with `--database-url` on PostgreSQL).

Loopback only: daphne, Milvus Lite and PostgreSQL are addressed on 127.0.0.1. Everything the run
starts is stopped on exit, Ctrl-C and SIGTERM included.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .common import ROOT, build_corpus, make_queries, percentile, print_table, setup_django, tear_down, write_results

STREAM_PATH = "/api/chat/stream"
# Not among the measured demo questions: they warm jieba, the models and the Milvus collections.
DEMO_WARM_UP = ["你好", "年假有多少天？", "今天北京天气怎么样？", "访客 Wi-Fi 怎么连接？", "出差住宿标准是多少？"]
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


# --- processes ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Daphne:
    """One daphne process serving ragsite.asgi on loopback with this process's environment."""

    def __init__(self, *, log_path: Path, extra_env: dict[str, str]) -> None:
        self.log_path = log_path
        self.extra_env = extra_env
        self.process: subprocess.Popen | None = None
        self.base_url = ""

    def start(self, timeout: float = 90.0) -> str:
        import httpx

        daphne = Path(sys.executable).with_name("daphne")
        for _attempt in range(3):
            port = _free_port()
            log = open(self.log_path, "ab")  # noqa: SIM115 — the child keeps writing to it
            self.process = subprocess.Popen(
                [str(daphne), "-b", "127.0.0.1", "-p", str(port), "ragsite.asgi:application"],
                cwd=ROOT, env={**os.environ, **self.extra_env}, stdout=log, stderr=subprocess.STDOUT,
            )
            log.close()
            self.base_url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    httpx.get(self.base_url + STREAM_PATH, timeout=2.0, trust_env=False)
                    return self.base_url
                except httpx.HTTPError:
                    time.sleep(0.2)
            self.stop()
        raise RuntimeError(f"daphne did not start; its log:\n{self.log_tail()}")

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _milvus_pid() -> int | None:
    """The Milvus Lite binary this process started (setup_django's server)."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me and b"milvus_lite" in cmdline:
            return int(entry.name)
    return None


def _cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """Cores used by daphne, Milvus Lite and this process (the client) over one phase."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = {**pids, "client": os.getpid()}

    def __enter__(self) -> CpuMeter:
        self.started = time.perf_counter()
        self.before = {name: _cpu_seconds(pid) for name, pid in self.pids.items()}
        return self

    def __exit__(self, *exc) -> None:
        wall = time.perf_counter() - self.started
        self.cores = {
            name: round((_cpu_seconds(pid) - self.before[name]) / wall, 2) if wall else 0.0
            for name, pid in self.pids.items()
        }


class WriteProbe:
    """Times a one-row UPDATE transaction every `interval` s in a thread of this process.

    The row is touched by nobody else, so on PostgreSQL the probe waits for nothing but the
    machine; on SQLite it needs the database-wide write lock every chat turn also takes.
    """

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def create_table() -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE bench_write_probe (id integer PRIMARY KEY, n integer NOT NULL)")
            cursor.execute("INSERT INTO bench_write_probe (id, n) VALUES (1, 0)")

    def _run(self) -> None:
        from django.db import connection, transaction

        try:
            while not self._stop.wait(self.interval):
                started = time.perf_counter()
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute("UPDATE bench_write_probe SET n = n + 1 WHERE id = 1")
                self.samples.append((time.perf_counter() - started) * 1000)
        finally:
            connection.close()

    def __enter__(self) -> WriteProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        return _dist(self.samples) | {"samples": len(self.samples)}


# --- scratch PostgreSQL database ----------------------------------------------------------------


class ScratchPostgres:
    """CREATE DATABASE on the server of `url` (trust auth), DROP it at the end."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in {"postgres", "postgresql"}:
            raise SystemExit("--database-url must be postgres://user@127.0.0.1:5432/<db>")
        if parts.hostname not in LOOPBACK:
            raise SystemExit("--database-url must point at a loopback address (127.0.0.1)")
        self.admin_url = url
        self.name = f"ragsite_bench_chat_{int(time.time())}_{os.getpid()}"
        self.url = urlunsplit(parts._replace(path=f"/{self.name}"))

    def _execute(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as connection:
            connection.execute(sql)

    def create(self) -> str:
        self._execute(f'CREATE DATABASE "{self.name}"')
        return self.url

    def drop(self) -> None:
        from django.conf import settings

        if settings.configured:
            from django.db import connections

            connections.close_all()
        self._execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


# --- knowledge bases ----------------------------------------------------------------------------


def build_demo() -> dict:
    from django.core.management import call_command

    from knowledge.models import FAQ, Chunk, KnowledgeBase

    started = time.perf_counter()
    call_command("bootstrap", stdout=io.StringIO())
    kb = KnowledgeBase.objects.get(slug="demo")
    return {
        "slug": kb.slug,
        "seconds": round(time.perf_counter() - started, 1),
        "documents": kb.active_version.documents.count(),
        "chunks": Chunk.objects.filter(knowledge_base=kb).count(),
        "faqs": FAQ.objects.filter(knowledge_base=kb).count(),
    }


def build_synthetic(size: int) -> tuple[object, list[str], dict]:
    started = time.perf_counter()
    kb, texts, _vectors, _ids, build = build_corpus(size)
    return kb, texts, {"slug": kb.slug, "chunks": size, "seconds": round(time.perf_counter() - started, 1), **build}


def synthetic_questions(texts: list[str], count: int, *, seed: int, exclude: set[str] = frozenset()) -> list[str]:
    """`count` distinct spans of the corpus (deterministic), none of them in `exclude`."""
    questions: list[str] = []
    seen = set(exclude)
    batch = 0
    while len(questions) < count:
        for question in make_queries(texts, count * 2, seed=seed + batch):
            if question.strip() and question not in seen:
                seen.add(question)
                questions.append(question)
                if len(questions) == count:
                    break
        batch += 1
    return questions


def bench_user():
    """A plain signed-in user and its API token (it reads the internal synthetic KB; token
    requests need no session or CSRF round trip)."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user = get_user_model().objects.create_user(username="bench-chat", password=uuid.uuid4().hex)
    return user, Token.objects.create(user=user).key


# --- client -------------------------------------------------------------------------------------


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


async def ask(client, kb_slug: str, question: str, timeout: float) -> dict:
    """One streamed turn; times of the milestones in ms from sending the request."""
    import httpx

    record: dict = {"question": question, "status": None, "error": None, "trace_id": None, "deltas": 0}
    record["sent_at"] = time.time()  # wall clock, to compare with the server's stored timestamps
    started = time.perf_counter()

    async def consume() -> None:
        async with client.stream("POST", STREAM_PATH, json={"knowledge_base_id": kb_slug, "question": question}) as response:
            record["headers_ms"] = _ms(started)
            record["status"] = response.status_code
            if response.status_code != 200:
                body = (await response.aread()).decode(errors="replace")
                record["error"] = f"HTTP {response.status_code}: {body[:200]}"
                return
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line[6:]
                if payload == "[DONE]":
                    record["done_ms"] = _ms(started)
                    return
                part = json.loads(payload)
                kind = part.get("type")
                if kind == "start":
                    record["trace_id"] = part.get("messageId", "").removeprefix("msg-") or None
                elif kind == "data-retrieval":
                    record["retrieval_ms"] = _ms(started)
                elif kind == "text-delta":
                    now = _ms(started)
                    record.setdefault("first_delta_ms", now)
                    record["last_delta_ms"] = now
                    record["deltas"] += 1
                elif kind == "data-answer":
                    record["answer_ms"] = _ms(started)
                    record["hit_type"] = part.get("data", {}).get("hit_type")
                elif kind == "error":
                    record["error"] = f"error part: {part.get('errorText')}"

    try:
        await asyncio.wait_for(consume(), timeout)
    except asyncio.TimeoutError:
        record["error"] = f"no [DONE] within {timeout:g}s"
    except (httpx.HTTPError, ValueError) as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"
    if record["error"] is None and "done_ms" not in record:
        record["error"] = "stream ended without [DONE]"
    if record["error"] is None and "first_delta_ms" not in record:
        record["error"] = "no text-delta"
    return record


def make_client(base_url: str, token: str, connections: int, timeout: float):
    import httpx

    return httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Token {token}"},
        timeout=httpx.Timeout(timeout),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        trust_env=False,  # loopback only: never through a proxy from the environment
    )


async def run_level(base_url: str, token: str, kb_slug: str, questions: list[str], concurrency: int,
                    *, request_timeout: float, level_timeout: float) -> tuple[list[dict], float, bool]:
    """`concurrency` clients, each asking the next question when its previous answer is done.

    Returns the records, the wall time and whether the level finished within `level_timeout`.
    """
    queue: asyncio.Queue[str] = asyncio.Queue()
    for question in questions:
        queue.put_nowait(question)
    records: list[dict] = []

    async with make_client(base_url, token, concurrency, request_timeout) as client:
        async def worker() -> None:
            while True:
                try:
                    question = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                records.append(await ask(client, kb_slug, question, request_timeout))

        started = time.perf_counter()
        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        done, pending = await asyncio.wait(tasks, timeout=level_timeout)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        wall = time.perf_counter() - started
    return records, wall, not pending


def sequential(base_url: str, token: str, kb_slug: str, questions: list[str], request_timeout: float) -> list[dict]:
    records, _wall, _finished = asyncio.run(run_level(
        base_url, token, kb_slug, questions, 1, request_timeout=request_timeout,
        level_timeout=request_timeout * max(1, len(questions)),
    ))
    return records


# --- bare retrieval -----------------------------------------------------------------------------


def chat_retrieval_request(kb, question: str):
    """The RetrievalRequest a new chat turn sends for `question` (rules file defaults)."""
    from chat.contracts import ChatOptions
    from chat.pipeline.preparation import RuleFollowUpRewriter, prepare_retrieval
    from chat.pipeline.rules import load_rules
    from engines.lexical import visible_text
    from retrieval.contracts import RetrievalRequest

    rules = load_rules()
    prepared, _degradations = prepare_retrieval(
        question=visible_text(question), history=(), options=ChatOptions(), rules=rules,
        rewriter=RuleFollowUpRewriter(rules),
    )
    plan = prepared.plan
    return RetrievalRequest(
        kb_id=kb.pk, question=prepared.rewritten_query, top_k=plan.doc_top_k, mode=plan.mode,
        candidate_k=plan.candidate_k, enable_query_rewrite=plan.enable_query_rewrite,
        enable_rerank=plan.enable_rerank, enable_parent_expansion=plan.enable_parent_expansion,
        document_ids=plan.document_ids,
    )


def bare_retrieval(kb, questions: list[str], warm_up: list[str]) -> dict:
    """RetrievalService.retrieve in this process: misses on the first pass, L2 hits on the second."""
    from django.core.cache import cache

    from retrieval.factory import build_retrieval_service

    service = build_retrieval_service(kb)
    for question in warm_up:
        service.retrieve(chat_retrieval_request(kb, question))
    requests = [chat_retrieval_request(kb, q) for q in questions]
    cache.clear()  # this process's LocMem only; the pipeline pass below starts cold too
    passes = {}
    for name in ("uncached", "cached"):
        timings = []
        for request in requests:
            started = time.perf_counter()
            service.retrieve(request)
            timings.append((time.perf_counter() - started) * 1000)
        passes[name] = timings
    return {"options": {k: v for k, v in vars(requests[0]).items() if k not in {"kb_id", "question"}}, **passes}


def pipeline_in_process(kb, questions: list[str], warm_up: list[str], user) -> dict:
    """RAGService.run in this process, no HTTP: time to Evidence, first Delta, Finished."""
    from django.core.cache import cache

    from chat.contracts import ChatQuery, Requester
    from chat.pipeline.events import Delta, Evidence, Finished
    from chat.pipeline.rag import RAGService

    service = RAGService()
    requester = Requester(user=user)
    for question in warm_up:
        service.answer(query=ChatQuery(knowledge_base_id=kb.slug, question=question), requester=requester)
    cache.clear()
    passes = {}
    for name in ("uncached", "cached"):
        marks: dict[str, list[float]] = {"evidence": [], "first_delta": [], "finished": []}
        for question in questions:
            started = time.perf_counter()
            first_delta = None
            for event in service.run(query=ChatQuery(knowledge_base_id=kb.slug, question=question), requester=requester):
                now = (time.perf_counter() - started) * 1000
                if isinstance(event, Evidence):
                    marks["evidence"].append(now)
                elif isinstance(event, Delta) and first_delta is None:
                    first_delta = now
                    marks["first_delta"].append(now)
                elif isinstance(event, Finished):
                    marks["finished"].append(now)
        passes[name] = {f"{mark}_ms": _dist(values) for mark, values in marks.items()}
    return passes


# --- figures ------------------------------------------------------------------------------------


def _dist(values) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"p50": None, "p95": None}
    return {"p50": percentile(values, 50), "p95": percentile(values, 95)}


def _ratio(a, b):
    return round(a / b, 2) if a is not None and b else None


def server_side(records: list[dict]) -> dict:
    """Stage timings from the stored traces, and what the stages do not cover.

    `unstaged_ms`: the trace's total minus its named stages, i.e. mostly `start_turn` (the
    question's write transaction) plus the bookkeeping between stages. `outside_ms`: the
    client's time to the first delta minus the trace's `first_token_ms`, i.e. everything before
    the pipeline's clock starts (HTTP, middleware, authentication, request validation, the wait
    for a chat thread, access check) and the delivery of the delta to the client.
    `before_turn_ms`: from sending the request to the stored question's `created_at` (same
    clock), i.e. the part of `outside_ms` before the pipeline plus `start_turn`'s lock wait.
    """
    from chat.models import Message, MessageRole
    from chat.models import QueryTrace

    by_id = {str(r["trace_id"]): r for r in records if r.get("trace_id")}
    rows = list(QueryTrace.objects.filter(trace_id__in=list(by_id)).values(
        "trace_id", "conversation_id", "stage_timings", "total_ms", "first_token_ms", "status", "cache"))
    asked_at = dict(Message.objects.filter(
        conversation_id__in=[row["conversation_id"] for row in rows], role=MessageRole.USER,
    ).values_list("conversation_id", "created_at"))
    stages: dict[str, list[float]] = {}
    unstaged, outside, before_turn, statuses, cache = [], [], [], Counter(), Counter()
    for row in rows:
        statuses[row["status"]] += 1
        cache["hits"] += row["cache"].get("hit_count", 0)
        cache["misses"] += row["cache"].get("miss_count", 0)
        timings: dict[str, float] = {}
        for stage in row["stage_timings"]:
            timings[stage["stage"]] = timings.get(stage["stage"], 0.0) + stage["elapsed_ms"]
        for name, value in timings.items():
            stages.setdefault(name, []).append(value)
        unstaged.append(row["total_ms"] - sum(timings.values()))
        record = by_id[str(row["trace_id"])]
        if record.get("first_delta_ms") is not None and row["first_token_ms"] is not None:
            outside.append(record["first_delta_ms"] - row["first_token_ms"])
        if row["conversation_id"] in asked_at:
            before_turn.append((asked_at[row["conversation_id"]].timestamp() - record["sent_at"]) * 1000)
    return {
        "traces": sum(statuses.values()),
        "trace_status": dict(statuses),
        "l2_cache_events": dict(cache),
        "stage_ms": {name: _dist(values) for name, values in stages.items()},
        "unstaged_ms": _dist(unstaged),
        "outside_ms": _dist(outside),
        "before_turn_ms": _dist(before_turn),
    }


def client_side(records: list[dict]) -> dict:
    ok = [r for r in records if r["error"] is None]
    return {
        "requests": len(records),
        "errors": len(records) - len(ok),
        "error_samples": [r["error"] for r in records if r["error"]][:5],
        "hit_types": dict(Counter(r.get("hit_type") for r in ok)),
        **{f"{m}_ms": _dist(r.get(f"{m}_ms") for r in ok) for m in ("headers", "retrieval", "first_delta", "done")},
    }


def measure_kb(base_url: str, token: str, user, kb, questions: list[str], warm_up: list[str], timeout: float) -> dict:
    for record in sequential(base_url, token, kb.slug, warm_up, timeout):
        if record["error"]:
            print(f"  warm-up {record['question']!r}: {record['error']}")
    result = {"questions": len(questions)}
    for name in ("uncached", "cached"):
        records = sequential(base_url, token, kb.slug, questions, timeout)
        result[name] = {**client_side(records), "server": server_side(records)}
    bare = bare_retrieval(kb, questions, warm_up)
    in_process = pipeline_in_process(kb, questions, warm_up, user)
    result["bare_retrieval_options"] = bare["options"]
    for name in ("uncached", "cached"):
        block = result[name]
        block["in_process_pipeline"] = in_process[name]
        block["bare_retrieve_ms"] = _dist(bare[name])
        bare_p50 = block["bare_retrieve_ms"]["p50"]
        block["retrieval_part_vs_bare_p50"] = _ratio(block["retrieval_ms"]["p50"], bare_p50)
        block["first_delta_vs_bare_p50"] = _ratio(block["first_delta_ms"]["p50"], bare_p50)
    return result


def levels_up_to(maximum: int) -> list[int]:
    levels, level = [], 1
    while level < maximum:
        levels.append(level)
        level *= 2
    return levels + [maximum]


def ramp(base_url: str, token: str, kb_slug: str, pool: list[str], args, pids: dict) -> dict:
    levels_done = []
    held = None
    stopped_because = f"reached --max-concurrency {args.max_concurrency}"
    offset = 0
    for level in levels_up_to(args.max_concurrency):
        count = max(args.min_level_requests, args.level_factor * level)
        questions, offset = pool[offset : offset + count], offset + count
        with CpuMeter(pids) as cpu, WriteProbe() as probe:
            records, wall, finished = asyncio.run(run_level(
                base_url, token, kb_slug, questions, level,
                request_timeout=args.request_timeout, level_timeout=args.level_timeout,
            ))
        ok = [r for r in records if r["error"] is None]
        stats = {
            "concurrency": level,
            **client_side(records),
            "unfinished": len(questions) - len(records),
            "wall_seconds": round(wall, 2),
            "answers_per_second": round(len(ok) / wall, 2) if wall else 0.0,
            "cpu_cores": cpu.cores,
            "write_probe_ms": probe.summary(),
            "server": server_side(records),
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
        p95 = stats["first_delta_ms"]["p95"]
        stats["held"] = finished and not stats["errors"] and p95 is not None and p95 <= args.limit_ms
        levels_done.append(stats)
        print(f"  concurrency {level:>3}: {len(records)} answers, p95 first delta {p95} ms, "
              f"{stats['answers_per_second']} answers/s, errors {stats['errors']}", flush=True)
        if not stats["held"]:
            if not finished:
                stopped_because = f"level {level} did not finish within {args.level_timeout:g}s"
            elif stats["errors"]:
                stopped_because = f"errors at concurrency {level}: {stats['error_samples'][0]}"
            else:
                stopped_because = f"p95 first delta {p95} ms > {args.limit_ms:g} ms at concurrency {level}"
            break
        held = stats
    return {
        "kb": kb_slug,
        "limit_first_delta_p95_ms": args.limit_ms,
        "stopped_because": stopped_because,
        "last_held": None if held is None else {
            k: held[k] for k in ("concurrency", "first_delta_ms", "done_ms", "answers_per_second", "cpu_cores")
        },
        "levels": levels_done,
    }


# --- report -------------------------------------------------------------------------------------


def _pair(block: dict) -> str:
    return f"{block['p50']}/{block['p95']}"


def report(results: dict) -> None:
    rows = []
    for name, kb in results["kbs"].items():
        for cache in ("uncached", "cached"):
            block = kb[cache]
            pipeline = block["in_process_pipeline"]
            rows.append([
                name, cache, f"{block['requests'] - block['errors']}/{block['requests']}",
                _pair(block["headers_ms"]), _pair(block["retrieval_ms"]), _pair(block["first_delta_ms"]),
                _pair(block["done_ms"]), _pair(pipeline["evidence_ms"]), _pair(pipeline["first_delta_ms"]),
                _pair(block["bare_retrieve_ms"]), block["retrieval_part_vs_bare_p50"], block["first_delta_vs_bare_p50"],
            ])
    print("\nOne question at a time, ms p50/p95 (SSE: from sending the request; in-process: RAGService.run):")
    print_table(["kb", "cache", "ok", "SSE headers", "data-retrieval", "first delta", "[DONE]", "in-proc evidence",
                 "in-proc delta", "bare retrieve", "retr/bare", "delta/bare"], rows)

    stage_rows = []
    for name, kb in results["kbs"].items():
        server = kb["uncached"]["server"]
        stages = server["stage_ms"]
        stage_rows.append([name] + [stages.get(s, {}).get("p50") for s in
                                    ("route", "faq_search", "doc_search", "context_build", "llm_generation",
                                     "citation_check")]
                          + [server["unstaged_ms"]["p50"], server["outside_ms"]["p50"], server["before_turn_ms"]["p50"]])
    print("\nServer stages from the traces (uncached, p50 ms; unstaged ≈ start_turn write; outside = before the"
          " pipeline + delivery):")
    print_table(["kb", "route", "faq", "doc_search", "context", "generation", "cite_check", "unstaged", "outside",
                 "before turn"], stage_rows)

    ramp_result = results["ramp"]
    ramp_rows = []
    for level in ramp_result["levels"]:
        ramp_rows.append([
            level["concurrency"], f"{level['requests'] - level['errors']}/{level['requests']}",
            _pair(level["retrieval_ms"]), _pair(level["first_delta_ms"]), _pair(level["done_ms"]),
            level["answers_per_second"], level["cpu_cores"].get("daphne"), level["cpu_cores"].get("milvus"),
            level["cpu_cores"].get("client"), _pair(level["server"]["stage_ms"].get("doc_search", {"p50": None, "p95": None})),
            _pair(level["server"]["unstaged_ms"]), _pair(level["server"]["outside_ms"]),
            _pair(level["server"]["before_turn_ms"]), _pair(level["write_probe_ms"]), level["load_average_1m"],
            "yes" if level["held"] else "no",
        ])
    print(f"\nRamp on {ramp_result['kb']} ({results['database']}), ms p50/p95, distinct questions:")
    print_table(["streams", "ok", "data-retrieval", "first delta", "[DONE]", "answers/s", "cpu daphne",
                 "cpu milvus", "cpu client", "doc_search", "unstaged", "outside", "before turn", "write probe",
                 "load 1m", "held"], ramp_rows)
    held = ramp_result["last_held"]
    if held:
        print(f"\nlast level held: {held['concurrency']} concurrent streams — first delta p50 "
              f"{held['first_delta_ms']['p50']} ms, p95 {held['first_delta_ms']['p95']} ms, "
              f"{held['answers_per_second']} answers/s ({ramp_result['stopped_because']})")
    else:
        print(f"\nno level held ({ramp_result['stopped_because']})")


# --- main ---------------------------------------------------------------------------------------


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2k-chunk KB, fewer questions, up to 16 streams")
    parser.add_argument("--size", type=int, default=None, help="chunks of the synthetic KB (default 10000, quick 2000)")
    parser.add_argument("--questions", type=int, default=None, help="synthetic-KB questions per pass (default 100, quick 20)")
    parser.add_argument("--max-concurrency", type=int, default=None, help="highest ramp level (default 64, quick 16)")
    parser.add_argument("--level-factor", type=int, default=3, help="requests per level = factor × level …")
    parser.add_argument("--min-level-requests", type=int, default=10, help="… but at least this many")
    parser.add_argument("--limit-ms", type=float, default=1000.0, help="p95 time to the first delta a level must hold")
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument("--level-timeout", type=float, default=180.0)
    parser.add_argument("--chat-threads", type=int, default=None, help="RAG_CHAT_THREADS for daphne (default: settings)")
    parser.add_argument("--database-url", default=None,
                        help="PostgreSQL server to use instead of SQLite, e.g. postgres://postgres@127.0.0.1:5432/postgres "
                             "(a scratch database is created there and dropped at the end)")
    parser.add_argument("--keep-scratch", action="store_true", help="keep the scratch var dir (daphne log, SQLite)")
    args = parser.parse_args()
    args.size = args.size or (2000 if args.quick else 10000)
    args.questions = args.questions or (20 if args.quick else 100)
    args.max_concurrency = args.max_concurrency or (16 if args.quick else 64)
    if args.max_concurrency < 1:
        parser.error("--max-concurrency must be at least 1")

    signal.signal(signal.SIGTERM, _raise_interrupt)
    # Each process must keep its own L2 cache (LocMem): with a shared Redis the bare retrieval
    # would hit the entries the chat turns wrote.
    os.environ.pop("REDIS_URL", None)
    # The build is not what is measured: on a busy machine the scanned demo page's OCR can
    # overrun the default per-page budget and fail the bootstrap.
    os.environ.setdefault("RAG_OCR_SECONDS_PER_PAGE", "120")
    postgres = ScratchPostgres(args.database_url) if args.database_url else None
    if postgres is not None:
        os.environ["DATABASE_URL"] = postgres.create()
    else:
        os.environ.pop("DATABASE_URL", None)
    stop_milvus = None
    daphne = None
    scratch = None
    started = time.perf_counter()
    load_start = os.getloadavg()
    try:
        stop_milvus = setup_django()
        scratch = Path(os.environ["RAGSITE_VAR_DIR"])
        from django.conf import settings

        database = "postgresql" if postgres else "sqlite"
        print(f"building the demo KB and a {args.size}-chunk KB ({database}) …", flush=True)
        demo_build = build_demo()
        from knowledge.models import KnowledgeBase

        demo = KnowledgeBase.objects.get(slug="demo")
        synthetic, texts, synthetic_build = build_synthetic(args.size)
        user, token = bench_user()
        WriteProbe.create_table()

        from demo.questions import QUESTIONS

        demo_questions = [q["question"] for q in QUESTIONS]
        synthetic_warm_up = synthetic_questions(texts, 3, seed=1001)
        synthetic_measured = synthetic_questions(texts, args.questions, seed=2001, exclude=set(synthetic_warm_up))
        levels = levels_up_to(args.max_concurrency)
        ramp_pool = synthetic_questions(
            texts, sum(max(args.min_level_requests, args.level_factor * n) for n in levels), seed=3001,
            exclude=set(synthetic_warm_up) | set(synthetic_measured),
        )

        extra_env = {"RAG_CHAT_THREADS": str(args.chat_threads)} if args.chat_threads else {}
        daphne = Daphne(log_path=scratch / "daphne.log", extra_env=extra_env)
        base_url = daphne.start()
        pids = {"daphne": daphne.pid, "milvus": _milvus_pid()}
        print(f"daphne on {base_url}; measuring …", flush=True)

        kbs = {
            "demo": measure_kb(base_url, token, user, demo, demo_questions, DEMO_WARM_UP, args.request_timeout),
            synthetic.slug: measure_kb(base_url, token, user, synthetic, synthetic_measured, synthetic_warm_up,
                                       args.request_timeout),
        }
        print("ramping concurrent streams …", flush=True)
        ramp_result = ramp(base_url, token, synthetic.slug, ramp_pool, args, pids)
        failed = any(kb[c]["errors"] for kb in kbs.values() for c in ("uncached", "cached")) or any(
            level["errors"] for level in ramp_result["levels"])

        results = {
            "provider": settings.RAG_PROVIDER,
            "database": database,
            "quick": args.quick,
            "settings": {
                "RAG_CHAT_THREADS": int(extra_env.get("RAG_CHAT_THREADS", settings.RAG_CHAT_THREADS)),
                "RAG_RETRIEVAL_THREADS": settings.RAG_RETRIEVAL_THREADS,
                "DEBUG": settings.DEBUG,
                "auth": "token (no session per request)",
            },
            "build": {"demo": demo_build, "synthetic": synthetic_build},
            "kbs": kbs,
            "ramp": ramp_result,
            "load_average": {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in os.getloadavg()]},
            "seconds": round(time.perf_counter() - started, 1),
        }
        if failed:
            results["daphne_log_tail"] = daphne.log_tail()
        report(results)
        path = write_results("chat", results)
        print(f"\nwrote {path} ({results['seconds']} s; load average {results['load_average']['start']} → "
              f"{results['load_average']['end']})")
    finally:
        tear_down(processes=[daphne], stop_milvus=stop_milvus, postgres=postgres, scratch=scratch,
                  keep_scratch=args.keep_scratch)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("\ninterrupted: daphne, Milvus Lite and the scratch data are gone", file=sys.stderr)
        sys.exit(130)
