"""`manage.py milvus_server`: serve a Milvus Lite database over gRPC so several processes share it.

A Milvus Lite file can be opened by one process only; web and worker therefore point
`MILVUS_URI` at the server this command runs (`http://127.0.0.1:19530` by default). It stays in
the foreground until SIGINT/SIGTERM (Procfile runners such as honcho send those) and then stops
Milvus Lite cleanly.

`LiteServer` is also what the test suite uses to run a throwaway server.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from types import FrameType

import grpc
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from milvus_lite.server import Server
from pymilvus import MilvusClient
from pymilvus.exceptions import MilvusException

logger = logging.getLogger(__name__)

DEFAULT_ADDRESS = "127.0.0.1:19530"
_DB_NAME_RE = re.compile(r"^[a-zA-Z0-9.\-_]+$")  # milvus_lite.server.Server's own rule


class LiteServerError(Exception):
    pass


class LiteServer:
    """One Milvus Lite server process serving `db_file` on a TCP `address` ("host:port")."""

    def __init__(self, *, db_file: Path, address: str) -> None:
        self.db_file = Path(db_file).absolute()
        self.host, self.port = _parse_address(address)
        self.address = f"{self.host}:{self.port}"
        name = self.db_file.name
        if not _DB_NAME_RE.match(name) or len(name) > 36:
            raise LiteServerError(
                f"Milvus Lite file name {name!r} must match [a-zA-Z0-9.-_]+ and be at most 36 "
                "characters"
            )
        if not self.db_file.parent.is_dir():
            raise LiteServerError(f"directory {self.db_file.parent} does not exist")
        # Built in start(): a milvus_lite Server that is merely garbage-collected deletes the
        # db's lock file, even when another process owns it.
        self._server: Server | None = None

    @property
    def uri(self) -> str:
        return f"http://{self.address}"

    def start(self, *, ready_timeout: float = 30.0) -> None:
        """Start the server and return once it answers gRPC calls, else raise LiteServerError."""
        if self._server is not None:
            return
        if _accepts_connections(self.host, self.port):
            raise LiteServerError(
                f"{self.address} is already in use (another milvus_server running?)"
            )
        server = Server(str(self.db_file), address=self.address)
        if not server.init():
            _defuse(server)
            raise LiteServerError("the Milvus Lite binary is missing from the milvus-lite package")
        if not server.start():
            if getattr(server, "_p", None) is None:
                # The lock is held elsewhere; Server.stop() would delete that owner's lock file.
                lock_fd = getattr(server, "_lock_fd", None)
                if lock_fd is not None:
                    lock_fd.close()
                    server._lock_fd = None
                _defuse(server)
                raise LiteServerError(
                    f"{self.db_file} is in use by another process (a running milvus_server, or "
                    "a process opening it as a *.db MILVUS_URI)"
                )
            exit_code = server._p.poll()
            server.stop()
            _defuse(server)
            raise LiteServerError(
                f"Milvus Lite exited at startup (exit code {exit_code}); can {self.address} be "
                "bound?"
            )
        self._server = server
        try:
            self._wait_until_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise

    def alive(self) -> bool:
        process = self._process()
        return process is not None and process.poll() is None

    def exit_code(self) -> int | None:
        process = self._process()
        return None if process is None else process.poll()

    def stop(self, *, grace: float = 10.0) -> None:
        """Stop the server; idempotent. Data is on disk after every acknowledged write."""
        server, self._server = self._server, None
        if server is None:
            return
        process = getattr(server, "_p", None)
        if process is not None and process.poll() is None:
            # Server.stop() alone waits 2 s and then SIGKILLs a TCP-mode server (only the UDS
            # mode watches its lock file); SIGTERM lets it exit at once.
            process.terminate()
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                logger.warning("Milvus Lite ignored SIGTERM for %.0fs; killing it", grace)
        server.stop()
        _defuse(server)

    def _process(self) -> subprocess.Popen[bytes] | None:
        # milvus_lite 2.5.1 keeps the child in `_p`; nothing public exposes it.
        return getattr(self._server, "_p", None) if self._server is not None else None

    def _wait_until_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error = "port not open yet"
        while time.monotonic() < deadline:
            if not self.alive():
                raise LiteServerError(
                    f"Milvus Lite exited during startup (exit code {self.exit_code()})"
                )
            if _accepts_connections(self.host, self.port):
                try:
                    # Dedicated, so close() really closes it: an idle shared channel left
                    # behind keeps pinging and Milvus Lite answers with "too_many_pings" GOAWAYs.
                    client = MilvusClient(uri=self.uri, timeout=2.0, dedicated=True)
                    try:
                        client.list_collections(timeout=2.0)
                        return
                    finally:
                        client.close()
                except (MilvusException, grpc.RpcError, grpc.FutureTimeoutError) as exc:
                    last_error = getattr(exc, "message", None) or type(exc).__name__
            time.sleep(0.1)
        raise LiteServerError(
            f"Milvus Lite at {self.address} not ready after {timeout:g}s ({last_error})"
        )


def _defuse(server: Server) -> None:
    """Make a finished Server's __del__ harmless: its stop() unlinks the lock and socket paths
    unconditionally, which by then may belong to a newer server of the same db."""
    missing = Path(tempfile.gettempdir()) / f"ragsite-milvus-defused-{uuid.uuid4().hex}"
    server._lock_path = str(missing)
    server._uds_path = str(missing)


def _parse_address(address: str) -> tuple[str, int]:
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise LiteServerError(f"address {address!r} must be host:port, e.g. {DEFAULT_ADDRESS}")
    return host.strip("[]"), int(port_text)


def _accepts_connections(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Command(BaseCommand):
    help = (
        "Serve the Milvus Lite database over gRPC on loopback so web and worker processes share "
        "it; runs in the foreground until SIGINT/SIGTERM."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--db",
            default=None,
            help="Milvus Lite file (default: VAR_DIR/milvus/ragsite.db). Its name must match "
            "[a-zA-Z0-9.-_]+ and be at most 36 characters.",
        )
        parser.add_argument(
            "--address", default=DEFAULT_ADDRESS, help=f"host:port (default {DEFAULT_ADDRESS})"
        )
        parser.add_argument(
            "--ready-timeout",
            type=float,
            default=30.0,
            help="seconds to wait for the server to answer (default 30)",
        )

    def handle(self, *args: object, **options: object) -> None:
        db_option = options.get("db")
        db_file = (
            Path(str(db_option)) if db_option else Path(settings.VAR_DIR) / "milvus" / "ragsite.db"
        )
        address = str(options["address"])
        ready_timeout = float(options["ready_timeout"])  # type: ignore[arg-type]

        db_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            server = LiteServer(db_file=db_file, address=address)
        except LiteServerError as exc:
            raise CommandError(str(exc)) from exc
        if not _is_loopback(server.host):
            self.stderr.write(
                f"Warning: Milvus Lite has no authentication and {server.host} is not a loopback "
                "address; anyone who can reach it can read and change the vectors."
            )

        stop_requested = threading.Event()

        def request_stop(signum: int, frame: FrameType | None) -> None:
            stop_requested.set()

        previous = {
            sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            try:
                server.start(ready_timeout=ready_timeout)
            except LiteServerError as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(f"Milvus Lite serving {server.db_file}")
            self.stdout.write(f"MILVUS_URI={server.uri}")
            self.stdout.flush()
            while not stop_requested.wait(0.5):
                if not server.alive():
                    raise CommandError(
                        f"Milvus Lite exited unexpectedly (exit code {server.exit_code()})"
                    )
            self.stdout.write("Stopping Milvus Lite…")
        finally:
            server.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.stdout.write("Milvus Lite stopped.")
