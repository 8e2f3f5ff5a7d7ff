"""make bench-serve: how many streaming answers one web process holds with a real-speed model.

The shape production has: a remote model that takes seconds per answer. Started in a scratch
var dir, all on 127.0.0.1:

- the fake OpenAI-compatible model (`benchmarks.fake_model`: `--first-delay` to the first token,
  then `--tokens` tokens at `--tokens-per-second`), in its own process;
- PostgreSQL: a scratch database on `--database-url`'s server (default 127.0.0.1:5432, the
  server's own max_connections, 100 by default), dropped at the end;
- the Milvus Lite server with the demo knowledge base (`manage.py bootstrap`'s builder, e5);
- one or more daphne processes serving `ragsite.asgi:application` with `RAG_PROVIDER=openai`
  pointed at the fake model, `DEBUG` off and the per-user abuse limits lifted (they would cap the
  load itself). Several processes share one listening socket (`daphne --fd`), as production runs
  them behind one port: the kernel hands each new connection to one of them.

Per level of the ramp (`--levels`, default 50, 100, 200, 500, 1,000) that many clients each ask
`--rounds` questions one after the other, the first after a random pause within the length of one
answer, so that about that many streams are open at once. Every client signs in with the same API
token and asks demo questions that are answered from documents by the model (the FAQ and
direct answers, which need no model, are left out). Reported per level: streams ok, errors by
code (HTTP status and `code`, an `error` part, a client timeout), the time to the first
`text-delta` minus the model's own first-token delay (p50 / p95), the time to `[DONE]` (p95),
the most streams the model had open at once, the peak of the scratch database's connections, and
the peak RSS of each web process. The client runs on the same machine (aiohttp, one process): its
CPU is reported too, as it competes with the server for the same cores.

    make bench-serve                        # one process, then two
    BENCH_SERVE_ARGS="--levels 50,100 --processes 1" make bench-serve
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from .chat import ScratchPostgres, _cpu_seconds, _free_port, bench_user, build_demo
from .common import ROOT, percentile, print_table, setup_django, tear_down, write_results
from .load import LOAD_ENV, _rss_mb

STREAM_PATH = "/api/chat/stream"
DEFAULT_LEVELS = (50, 100, 200, 500, 1000)


# --- processes ----------------------------------------------------------------------------------


class FakeModel:
    def __init__(self, *, first_delay: float, tokens_per_second: float, tokens: int, log_path: Path) -> None:
        self.args = ["--first-delay", str(first_delay), "--tokens-per-second", str(tokens_per_second),
                     "--tokens", str(tokens)]
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> str:
        import httpx

        port = _free_port()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.fake_model", "--port", str(port), *self.args],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                httpx.get(self.url + "/stats", timeout=1.0, trust_env=False)
                return self.url
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the fake model did not start")

    def stats(self) -> dict:
        import httpx

        return httpx.get(self.url + "/stats", timeout=5.0, trust_env=False).json()

    def reset_stats(self) -> None:
        import httpx

        httpx.post(self.url + "/stats/reset", timeout=5.0, trust_env=False).raise_for_status()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            process.wait(timeout=10)


class WebProcesses:
    """`count` daphne processes accepting on one listening socket (`daphne --fd`)."""

    def __init__(self, *, count: int, env: dict[str, str], log_dir: Path) -> None:
        self.count = count
        self.env = env
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen] = []
        self.socket: socket.socket | None = None
        self.base_url = ""

    def start(self, timeout: float = 120.0) -> str:
        import httpx

        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(4096)
        listener.set_inheritable(True)
        self.socket = listener
        fd = listener.fileno()
        daphne = Path(sys.executable).with_name("daphne")
        # Each process also listens on a port of its own, where it is asked whether it is ready:
        # through the shared socket the kernel would pick which one answers.
        self.own_urls = []
        for number in range(self.count):
            own = _free_port()
            self.own_urls.append(f"http://127.0.0.1:{own}")
            with open(self.log_dir / f"daphne-{self.count}-{number}.log", "ab") as log:
                self.processes.append(subprocess.Popen(
                    [str(daphne), "--fd", str(fd), "-e", f"tcp:port={own}:interface=127.0.0.1",
                     "ragsite.asgi:application"],
                    cwd=ROOT, env={**os.environ, **self.env}, stdout=log, stderr=subprocess.STDOUT,
                    pass_fds=(fd,),
                ))
        self.base_url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        deadline = time.monotonic() + timeout
        waiting = list(self.own_urls)
        while waiting and time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.processes):
                raise RuntimeError("a web process exited while starting")
            try:
                httpx.get(waiting[0] + STREAM_PATH, timeout=5.0, trust_env=False)
                waiting.pop(0)
            except httpx.HTTPError:
                time.sleep(0.3)
        if waiting:
            raise RuntimeError("the web processes did not start")
        return self.base_url

    def _log(self, number: int) -> str:
        try:
            return (self.log_dir / f"daphne-{self.count}-{number}.log").read_text(errors="replace")
        except OSError:
            return ""

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes = []
        if self.socket is not None:
            self.socket.close()
            self.socket = None


class Gauges:
    """Peaks sampled every `interval` s during a level: database connections, RSS per process."""

    def __init__(self, *, database_url: str, pids: dict[str, int], interval: float = 0.25) -> None:
        self.database_url = database_url
        self.pids = pids
        self.interval = interval
        self.peak_connections = 0
        self.peak_rss: dict[str, float] = {name: 0.0 for name in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.database_url, autocommit=True) as connection:
            while True:
                count = connection.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()[0]
                self.peak_connections = max(self.peak_connections, count)
                for name, pid in self.pids.items():
                    self.peak_rss[name] = max(self.peak_rss[name], _rss_mb(pid) or 0.0)
                if self._stop.wait(self.interval):
                    return

    def __enter__(self) -> Gauges:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


# --- the client ---------------------------------------------------------------------------------


async def stream_once(session, *, url: str, token: str, kb: str, question: str, timeout: float) -> dict:
    """One answer read to its end; times in seconds from sending the request."""
    import aiohttp

    record: dict = {"status": None, "error": None, "first_delta": None, "done": None}
    started = time.perf_counter()
    body = {"knowledge_base_id": kb, "question": question, "enable_query_rewrite": False}
    try:
        async with session.post(url, json=body, headers={"Authorization": f"Token {token}"},
                                timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            record["status"] = response.status
            if response.status != 200:
                try:
                    payload = await response.json(content_type=None)
                    code = payload.get("code")
                except (ValueError, aiohttp.ClientError):
                    code = None
                record["error"] = f"HTTP {response.status} {code or ''}".strip()
                record["retry_after"] = response.headers.get("Retry-After")
                return record
            tail = b""
            async for chunk in response.content.iter_any():
                window = tail + chunk
                if record["first_delta"] is None and b'"type":"text-delta"' in window:
                    record["first_delta"] = time.perf_counter() - started
                if b'"type":"error"' in window:
                    record["error"] = "error part"
                if b"data: [DONE]" in window:
                    record["done"] = time.perf_counter() - started
                tail = window[-64:]
            if record["done"] is None and record["error"] is None:
                record["error"] = "stream ended without [DONE]"
    except asyncio.TimeoutError:
        record["error"] = "client timeout"
    except aiohttp.ClientError as exc:
        record["error"] = f"client {type(exc).__name__}"
    return record


async def run_level(*, base_url: str, token: str, kb: str, questions: list[str], clients: int, rounds: int,
                    answer_seconds: float, timeout: float) -> tuple[list[dict], float]:
    import aiohttp

    url = base_url + STREAM_PATH
    rng = random.Random(clients)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def client(number: int) -> list[dict]:
            await asyncio.sleep(rng.uniform(0, answer_seconds))
            records = []
            for round_number in range(rounds):
                question = questions[(number + round_number) % len(questions)]
                records.append(await stream_once(session, url=url, token=token, kb=kb, question=question,
                                                 timeout=timeout))
            return records

        started = time.perf_counter()
        results = await asyncio.gather(*(client(n) for n in range(clients)))
        wall = time.perf_counter() - started
    return [r for records in results for r in records], wall


def summarise(records: list[dict], *, first_delay: float) -> dict:
    ok = [r for r in records if r["error"] is None]
    errors = Counter(r["error"] for r in records if r["error"] is not None)
    firsts = [max(0.0, r["first_delta"] - first_delay) for r in ok if r["first_delta"] is not None]
    dones = [r["done"] for r in ok if r["done"] is not None]
    retry_after = sorted({r["retry_after"] for r in records if r.get("retry_after")})
    return {
        "streams": len(records),
        "ok": len(ok),
        "errors": dict(errors),
        "retry_after": retry_after,
        "first_delta_minus_model_delay_s": {"p50": percentile(firsts, 50), "p95": percentile(firsts, 95)}
        if firsts else None,
        "done_s": {"p50": percentile(dones, 50), "p95": percentile(dones, 95)} if dones else None,
    }


# --- the run ------------------------------------------------------------------------------------


def model_questions(base_url: str, token: str, kb: str, *, limit: int | None = None) -> list[str]:
    """The demo questions answered from documents by the model (of the first `limit`), asked
    once each, eight at a time: this warms the server up too (jieba, e5, the Milvus client)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from demo.questions import QUESTIONS

    def hit_type(question: str) -> str | None:
        with httpx.Client(base_url=base_url, timeout=120, trust_env=False,
                          headers={"Authorization": f"Token {token}"}) as client:
            with client.stream("POST", STREAM_PATH, json={"knowledge_base_id": kb, "question": question,
                                                          "enable_query_rewrite": False}) as response:
                for line in response.iter_lines():
                    if line.startswith("data: {") and '"data-answer"' in line:
                        return json.loads(line[6:])["data"]["hit_type"]
        return None

    questions = [item["question"] for item in QUESTIONS][:limit]
    with ThreadPoolExecutor(max_workers=8) as pool:
        kinds = list(pool.map(hit_type, questions))
    return [q for q, kind in zip(questions, kinds) if kind == "rag"]


def measure(args, *, processes: int, env: dict[str, str], token: str, scratch: Path, model: FakeModel) -> dict:
    web = WebProcesses(count=processes, env=env, log_dir=scratch)
    try:
        base_url = web.start()
        print(f"{processes} web process(es) on {base_url}; warming up …", flush=True)
        questions = model_questions(web.own_urls[0], token, "demo")
        if not questions:
            raise RuntimeError("no demo question reached the model")
        for own_url in web.own_urls[1:]:  # every process warms up (jieba, e5, its Milvus client)
            model_questions(own_url, token, "demo", limit=8)
        answer_seconds = args.first_delay + args.tokens / args.tokens_per_second
        pids = {f"web{n}": pid for n, pid in enumerate(web.pids)}
        levels = []
        for clients in args.levels:
            model.reset_stats()
            cpu_before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
            client_before = time.process_time()
            with Gauges(database_url=os.environ["DATABASE_URL"], pids=pids) as gauges:
                records, wall = asyncio.run(run_level(
                    base_url=base_url, token=token, kb="demo", questions=questions, clients=clients,
                    rounds=args.rounds, answer_seconds=answer_seconds, timeout=args.request_timeout,
                ))
            stats = model.stats()
            level = {
                "clients": clients,
                **summarise(records, first_delay=args.first_delay),
                "wall_s": round(wall, 1),
                "model_max_open_streams": stats["max_open"],
                "peak_db_connections": gauges.peak_connections,
                "peak_rss_mb": gauges.peak_rss,
                "cores": {name: round((_cpu_seconds(pid) - cpu_before[name]) / wall, 2) for name, pid in pids.items()}
                | {"client": round((time.process_time() - client_before) / wall, 2)},
            }
            levels.append(level)
            print(json.dumps(level, ensure_ascii=False), flush=True)
        return {"processes": processes, "questions": len(questions), "levels": levels}
    finally:
        web.stop()


def report(results: dict) -> None:
    print()
    for run in results["runs"]:
        print(f"{run['processes']} web process(es), model {results['model']}:")
        rows = []
        for level in run["levels"]:
            first = level["first_delta_minus_model_delay_s"] or {}
            done = level["done_s"] or {}
            rows.append([
                level["clients"], level["streams"], level["ok"],
                ", ".join(f"{k}×{v}" for k, v in level["errors"].items()) or "—",
                f"{first.get('p50', '—')} / {first.get('p95', '—')}", done.get("p95", "—"),
                level["model_max_open_streams"] or "—", level["peak_db_connections"],
                " / ".join(str(v) for v in level["peak_rss_mb"].values()),
                " / ".join(f"{v}" for v in level["cores"].values()),
            ])
        print_table(["clients", "streams", "ok", "errors", "1st delta−delay p50/p95 s", "done p95 s",
                     "model streams", "db conns", "RSS MB", "cores (web…/client)"], rows)
        print()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default=",".join(map(str, DEFAULT_LEVELS)),
                        help="concurrent clients per level, comma-separated")
    parser.add_argument("--processes", default="1,2", help="web process counts to measure, comma-separated")
    parser.add_argument("--rounds", type=int, default=2, help="questions each client asks in a level")
    parser.add_argument("--first-delay", type=float, default=0.3, help="the model's seconds to its first token")
    parser.add_argument("--tokens-per-second", type=float, default=30.0)
    parser.add_argument("--tokens", type=int, default=150)
    parser.add_argument("--request-timeout", type=float, default=120.0)
    parser.add_argument("--chat-threads", type=int, default=None, help="RAG_CHAT_THREADS (default: settings)")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/postgres",
                        help="the PostgreSQL server (loopback) where the scratch database is created")
    parser.add_argument("--keep-scratch", action="store_true")
    args = parser.parse_args()
    args.levels = [int(x) for x in args.levels.split(",") if x]
    process_counts = [int(x) for x in args.processes.split(",") if x]

    signal.signal(signal.SIGTERM, _raise_interrupt)
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("RAG_OCR_SECONDS_PER_PAGE", "120")
    # A thousand streams are a thousand sockets in the client and two thousand in a web process
    # (reader and model): the soft limit of open files is raised to the hard one for all of them.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    postgres = ScratchPostgres(args.database_url)
    os.environ["DATABASE_URL"] = postgres.create()
    stop_milvus = None
    scratch = None
    model = None
    started = time.perf_counter()
    try:
        stop_milvus = setup_django()
        scratch = Path(os.environ["RAGSITE_VAR_DIR"])
        from django.conf import settings

        print("building the demo KB …", flush=True)
        demo_build = build_demo()
        _user, token = bench_user()
        model = FakeModel(first_delay=args.first_delay, tokens_per_second=args.tokens_per_second,
                          tokens=args.tokens, log_path=scratch / "fake-model.log")
        model.start()
        env = {
            **LOAD_ENV,
            "RAG_PROVIDER": "openai",
            "OPENAI_BASE_URL": model.url + "/v1",
            "OPENAI_API_KEY": "sk-bench",
            "RAG_CHAT_MODEL": "fake-chat",
            "RAG_REWRITE_MODEL": "fake-chat",
            "RAG_RERANK_MODEL": "fake-rerank",
            "RAG_PROVIDER_MAX_RETRIES": "0",
        }
        if args.chat_threads:
            env["RAG_CHAT_THREADS"] = str(args.chat_threads)
        runs = [measure(args, processes=n, env=dict(env), token=token, scratch=scratch, model=model)
                for n in process_counts]
        import psycopg

        with psycopg.connect(args.database_url) as connection:
            max_connections = int(connection.execute("SHOW max_connections").fetchone()[0])
        results = {
            "model": f"{args.first_delay} s to the first token, {args.tokens} tokens at {args.tokens_per_second}/s",
            "settings": {
                "RAG_CHAT_THREADS": int(env.get("RAG_CHAT_THREADS", settings.RAG_CHAT_THREADS)),
                "RAG_CHAT_QUEUE_TIMEOUT_SECONDS": settings.RAG_CHAT_QUEUE_TIMEOUT_SECONDS,
                "DATABASE_POOL_MAX_SIZE": settings.DATABASE_POOL_MAX_SIZE,
                "postgres_max_connections": max_connections,
                "rounds": args.rounds,
            },
            "build": demo_build,
            "runs": runs,
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
            "seconds": round(time.perf_counter() - started, 1),
        }
        report(results)
        path = write_results("serve", results)
        print(f"wrote {path} ({results['seconds']} s)")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        tear_down(processes=[model], stop_milvus=stop_milvus, postgres=postgres, scratch=scratch,
                  keep_scratch=args.keep_scratch)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("\ninterrupted: the servers and the scratch data are gone", file=sys.stderr)
        sys.exit(130)
