"""The real parse sandbox handler, except that a file holding `ABORT_MARKER` makes the child
abort, as a parsing library crashing on a file nobody has found yet would."""

from __future__ import annotations

import os

from docparse.sandboxed import handle as _real_handle

ABORT_MARKER = b"PARSER-CRASH-TEST"


def handle(operation: str, payload: dict):
    if operation == "parse" and ABORT_MARKER in payload["data"]:
        os.abort()
    return _real_handle(operation, payload)
