"""Native engines in a child process of their own, so that an input they cannot take costs a child.

The embedding engine, the PDF library and the OCR runtime are C/C++ code fed with text and files
from outside. A bug in them (a buffer overflow on some input, an abort, a hang) would otherwise
kill or freeze the web process or the ingestion worker that called them — and with them every
request in flight, or the whole process group under a process manager that stops all when one
exits. A `Sandbox` runs such an engine in a long-lived child process and talks to it over a pipe:

- a call whose child dies raises `SandboxCrashed` (with the signal or exit status) and the next
  call starts a fresh child; the caller decides what the input that did it means;
- a call that overruns its deadline kills the child and raises `SandboxTimeout`;
- a child that cannot start raises `SandboxStartFailed` (nothing to do with the input);
- an exception raised by the handler comes back as itself when it pickles (`ParseError`, say),
  as `SandboxCallFailed` otherwise.

The child runs `python -m engines.sandbox_child MODULE`: it imports MODULE and answers each
request with `MODULE.handle(operation, payload)`. Handlers are plain functions of plain data and
must not need Django: the child never loads settings or opens a database connection.

One call at a time per sandbox (a lock): the engines behind them already use every configured
core for one call, and a single child keeps memory flat.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("!Q")
# No sandbox message is legitimately larger (a whole parsed document, images included, is
# bounded by the upload limit); a larger length means the stream is corrupt.
MAX_MESSAGE_BYTES = 1 << 31


class SandboxError(Exception):
    """A sandboxed call did not produce a result."""


class SandboxCrashed(SandboxError):
    """The child died while working on the call (a native crash, killed, out of memory)."""

    def __init__(self, message: str, *, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode

    @property
    def signal_name(self) -> str:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return f"exit status {self.returncode}"


class SandboxStartFailed(SandboxError):
    """The child could not be started or did not get ready (missing module, broken install)."""


class SandboxTimeout(SandboxError):
    """The call overran its deadline; the child was killed (the next call starts a new one)."""


class SandboxCallFailed(SandboxError):
    """The handler raised an exception that could not travel back as itself."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name


class Sandbox:
    """A child process running `handler_module`, started on first use and after each death."""

    def __init__(
        self,
        *,
        name: str,
        handler_module: str,
        env: Mapping[str, str] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self.name = name
        self.handler_module = handler_module
        self.env = dict(env or {})
        self.start_timeout = start_timeout
        self.starts = 0  # children started so far (observability and tests)
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None

    # -- public ------------------------------------------------------------------------------

    def call(self, operation: str, payload: Any = None, *, timeout: float | None = None) -> Any:
        """`handle(operation, payload)` in the child; raises what the handler raised, or a
        `SandboxError` when the child could not answer."""
        request = pickle.dumps((operation, payload), protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            process = self._ensure_started()
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                _write_message(process, request)
                status, value = pickle.loads(_read_message(process, deadline))
            except _Timeout:
                self._kill(process)
                raise SandboxTimeout(f"{self.name}: no answer within {timeout:.1f}s") from None
            except _ChildGone:
                returncode = self._reap(process)
                error = SandboxCrashed(f"{self.name}: the engine process died", returncode=returncode)
                logger.error("%s: child %s died (%s) during %s", self.name, process.pid, error.signal_name, operation)
                raise error from None
        if status == "ok":
            return value
        if status == "raise":
            raise value
        type_name, message = value
        raise SandboxCallFailed(type_name, message)

    def close(self) -> None:
        with self._lock:
            if self._process is not None:
                self._kill(self._process)

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    # -- child lifecycle ---------------------------------------------------------------------

    def _ensure_started(self) -> subprocess.Popen:
        process = self._process
        if process is not None and process.poll() is None:
            return process
        if process is not None:
            self._reap(process)
        env = {**os.environ, **self.env}
        env.pop("DJANGO_SETTINGS_MODULE", None)  # the child must not be able to load Django
        process = subprocess.Popen(
            [sys.executable, "-m", "engines.sandbox_child", self.handler_module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # the engine's own messages (and crash reports) go to our log stream
            env=env,
            cwd=_project_root(),
            close_fds=True,
        )
        self._process = process
        self.starts += 1
        try:
            ready = _read_message(process, time.monotonic() + self.start_timeout)
        except _Timeout:
            self._kill(process)
            raise SandboxStartFailed(f"{self.name}: the engine did not start within {self.start_timeout:.0f}s") from None
        except _ChildGone:
            returncode = self._reap(process)
            raise SandboxStartFailed(f"{self.name}: the engine process exited at start ({returncode})") from None
        status, value = pickle.loads(ready)
        if status != "ready":
            self._kill(process)
            type_name, message = value
            raise SandboxStartFailed(f"{self.name}: {type_name}: {message}")
        return process

    def _kill(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            process.kill()
        self._reap(process)

    def _reap(self, process: subprocess.Popen) -> int | None:
        for stream in (process.stdin, process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass  # a pipe to a dead child may refuse to flush; it is gone either way
        try:
            returncode = process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            returncode = process.wait()
        if self._process is process:
            self._process = None
        return returncode


class _Timeout(Exception):
    pass


class _ChildGone(Exception):
    pass


def _project_root() -> str:
    # The child imports handler modules of this project by name.
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write_message(process: subprocess.Popen, data: bytes) -> None:
    try:
        process.stdin.write(_HEADER.pack(len(data)) + data)
        process.stdin.flush()
    except (BrokenPipeError, ConnectionResetError, ValueError) as exc:
        raise _ChildGone() from exc


def _read_message(process: subprocess.Popen, deadline: float | None) -> bytes:
    header = _read_exactly(process, _HEADER.size, deadline)
    (length,) = _HEADER.unpack(header)
    if length > MAX_MESSAGE_BYTES:
        raise _ChildGone()
    return _read_exactly(process, length, deadline)


def _read_exactly(process: subprocess.Popen, count: int, deadline: float | None) -> bytes:
    fd = process.stdout.fileno()
    chunks: list[bytes] = []
    remaining = count
    while remaining:
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            raise _Timeout()
        # poll, not select: a busy web process has descriptors beyond select's 1,024.
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        if not poller.poll(None if wait is None else max(int(wait * 1000), 1)):
            raise _Timeout()
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise _ChildGone()
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
