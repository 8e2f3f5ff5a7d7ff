"""Shared set-up for benchmarks: a scratch environment with the real components.

Each benchmark run gets its own temporary var directory (SQLite unless DATABASE_URL is set,
media), its own Milvus Lite server on loopback (as `make run` uses it) and the local provider.
Results go to bench-results/<name>.json and a table on stdout. Benchmarks are not tests: they
measure, they do not assert.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench-results"


def setup_django() -> Callable[[], None]:
    """Configure Django on a scratch var dir and a private Milvus Lite server; returns stop()."""
    scratch = Path(tempfile.mkdtemp(prefix="ragsite-bench-"))
    os.environ["RAGSITE_VAR_DIR"] = str(scratch)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragsite.settings.local")
    os.environ["DJANGO_LOG_LEVEL"] = "WARNING"
    os.environ["MILVUS_COLLECTION_PREFIX"] = "bench"

    from tests.milvus import start_milvus_lite

    uri, stop_milvus = start_milvus_lite(scratch / "milvus")
    os.environ["MILVUS_URI"] = uri

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return stop_milvus


def percentile(values: Sequence[float], q: float) -> float:
    from evaluation.metrics import percentile as nearest_rank

    return round(nearest_rank(values, q), 3)


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


class PeakRss:
    """Samples the process's resident memory; peak minus start = what a phase added."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.start_mb = self.peak_mb = _rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, _rss_mb())
            time.sleep(self.interval)

    @contextmanager
    def measure(self) -> Iterator["PeakRss"]:
        self.start_mb = self.peak_mb = _rss_mb()
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()
            self.peak_mb = max(self.peak_mb, _rss_mb())

    @property
    def added_mb(self) -> float:
        return round(self.peak_mb - self.start_mb, 1)


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def write_results(name: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    payload = {
        "benchmark": name,
        "machine": {"python": platform.python_version(), "cpu_count": os.cpu_count(), "platform": platform.platform()},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **payload,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(row, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))
