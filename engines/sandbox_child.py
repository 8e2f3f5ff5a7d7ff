"""The child side of `engines.sandbox.Sandbox`: `python -m engines.sandbox_child MODULE`.

Reads length-prefixed pickled `(operation, payload)` requests on stdin and answers each on the
original stdout with `("ok", result)`, `("raise", exception)` or `("error", (type, message))`.
File descriptor 1 is pointed at stderr first, so that anything a native library prints cannot
corrupt the answers. Exits when the parent closes the pipe (the parent died or closed us).
"""

from __future__ import annotations

import faulthandler
import importlib
import os
import pickle
import struct
import sys

_HEADER = struct.Struct("!Q")


def _die_with_parent() -> None:
    # Linux: the kernel sends SIGKILL to this child if the parent goes away mid-computation,
    # when reading EOF from the pipe would come only after the computation.
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass  # not Linux: the EOF on stdin still ends the child


def _read(stream, count: int) -> bytes | None:
    data = b""
    while len(data) < count:
        chunk = stream.read(count - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _send(out, message: tuple) -> None:
    try:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - whatever fails to pickle is reported, not lost
        data = pickle.dumps(("error", (type(exc).__name__, f"unpicklable answer: {exc}")))
    out.write(_HEADER.pack(len(data)) + data)
    out.flush()


def main(module_name: str) -> int:
    _die_with_parent()
    faulthandler.enable(sys.stderr)  # a native crash leaves its Python stack in the log
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    try:
        handler = importlib.import_module(module_name)
        prepare = getattr(handler, "prepare", None)
        if prepare is not None:
            prepare()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        _send(answers, ("failed", (type(exc).__name__, str(exc))))
        return 1
    _send(answers, ("ready", None))
    while True:
        header = _read(requests, _HEADER.size)
        if header is None:
            return 0
        (length,) = _HEADER.unpack(header)
        body = _read(requests, length)
        if body is None:
            return 0
        operation, payload = pickle.loads(body)
        try:
            result = handler.handle(operation, payload)
        except Exception as exc:  # noqa: BLE001 - every handler failure travels to the caller
            try:
                pickle.loads(pickle.dumps(exc))
            except Exception:  # noqa: BLE001 - not every exception survives a round trip
                _send(answers, ("error", (type(exc).__name__, str(exc))))
            else:
                _send(answers, ("raise", exc))
            continue
        _send(answers, ("ok", result))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
