"""What every retrieval search does the same way: run its channels concurrently on the shared
pool (cancellable, each timed), and embed the query through the L2 cache.

`RetrievalService` (documents) and `FaqRetrieval` (FAQ questions) build their own jobs and
decide what a failed channel means; how jobs run and how query vectors are cached is here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from concurrent.futures import wait as wait_futures

from engines.lexical import fold_characters
from engines.ports import Embedder, ProviderError, RetrievalCache, VectorStoreError

from . import cache as l2
from .contracts import CacheEvent, RetrievalCancelled
from .fusion import RankedHit

Job = Callable[[], list[RankedHit]]
ChannelFailure = ProviderError | VectorStoreError


def run_channels(
    jobs: Mapping[str, Job], *, executor: Executor, cancel: threading.Event | None
) -> tuple[dict[str, tuple[list[RankedHit], float]], dict[str, ChannelFailure]]:
    """({name: (hits, elapsed ms)}, {name: the provider or vector-store error}) for `jobs`.

    Waits in short slices so a set `cancel` raises `RetrievalCancelled` at once; on any way out
    other than completion the jobs not yet started are cancelled. Other errors propagate.
    """
    futures: dict[str, Future] = {name: executor.submit(_timed, job) for name, job in jobs.items()}
    try:
        pending = set(futures.values())
        while pending:
            if cancel is not None and cancel.is_set():
                raise RetrievalCancelled("retrieval cancelled by the caller")
            _done, pending = wait_futures(pending, timeout=0.05)
    except BaseException:
        for future in futures.values():
            future.cancel()
        raise
    results: dict[str, tuple[list[RankedHit], float]] = {}
    failures: dict[str, ChannelFailure] = {}
    for name, future in futures.items():
        try:
            results[name] = future.result()
        except (ProviderError, VectorStoreError) as exc:
            failures[name] = exc
    return results, failures


def query_vector(
    *, embedder: Embedder, cache: RetrievalCache | None, text: str, events: list[CacheEvent], use_cache: bool
) -> list[float]:
    """The query's embedding, from the L2 cache when allowed (the hit or miss is recorded).

    The question is folded as the sparse index folds it (NFKC, traditional characters to
    simplified, case kept): "域賬號密碼最少要幾位" then lands where "域账号密码最少要几位" does
    instead of near other traditional text."""
    text = fold_characters(text)
    if not use_cache or cache is None:
        return embedder.embed_query(text)
    key = l2.embedding_key(model=embedder.model, dimension=embedder.dimension, text=text)
    cached = cache.get(key)
    events.append(CacheEvent("query_embedding", cached is not None, "embedding"))
    if cached is not None:
        return cached
    vector = embedder.embed_query(text)
    cache.set(key, list(vector), ttl=cache.embedding_ttl)
    return vector


def _timed(job: Job) -> tuple[list[RankedHit], float]:
    started = time.perf_counter()
    hits = job()
    return hits, round((time.perf_counter() - started) * 1000, 2)
