"""The real e5 engine with one more input it cannot take, for testing what contains a crash.

Text containing `ABORT_MARKER` makes the engine process abort, as a native crash on an input
nobody has found yet would; everything else is embedded by the real bundled engine. Selected
with RAG_LOCAL_EMBEDDING_ENGINE=tests.fakes.aborting_e5 (the sandbox child imports it by name).
"""

from __future__ import annotations

import os

from engines.providers.e5_engine import handle as _real_handle
from engines.providers.e5_engine import prepare  # noqa: F401 - the sandbox child calls it

ABORT_MARKER = "触发引擎崩溃的内容"


def handle(operation: str, texts: list[str]):
    if any(ABORT_MARKER in text for text in texts):
        os.abort()
    return _real_handle(operation, texts)
