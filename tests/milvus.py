"""A throwaway Milvus Lite server for the test session (real engine, gRPC on loopback)."""

from __future__ import annotations

import atexit
import os
import socket
from collections.abc import Callable
from pathlib import Path

from pymilvus import MilvusClient

from engines.management.commands.milvus_server import LiteServer, LiteServerError


# What the product's own store sets for loopback Milvus (engines.milvus_store): no keepalive pings
# on idle channels, which Milvus Lite answers with "too_many_pings" GOAWAYs.
_LOOPBACK_GRPC_OPTIONS = {"grpc.keepalive_permit_without_calls": False, "grpc.use_local_subchannel_pool": 1}


def admin_client(uri: str, *, timeout: float | None = 10) -> MilvusClient:
    """A client of the test's own for inspecting or cleaning collections.

    Dedicated, so `close()` really closes its channel: pymilvus keeps a shared connection in a
    process-wide registry after its client closes, where it keeps pinging, is sent away by the
    server, and fails the next test that reuses it after 30 idle seconds.
    """
    return MilvusClient(uri=uri, timeout=timeout, dedicated=True, grpc_options=dict(_LOOPBACK_GRPC_OPTIONS))


def start_milvus_lite(
    tmpdir: str | os.PathLike[str], *, ready_timeout: float = 30.0
) -> tuple[str, Callable[[], None]]:
    """Start Milvus Lite on a free 127.0.0.1 port with its file in `tmpdir`.

    Returns the URI to use as MILVUS_URI and a callable that stops the server (idempotent; it
    also runs at interpreter exit in case the caller never gets to it).
    """
    directory = Path(tmpdir)
    directory.mkdir(parents=True, exist_ok=True)
    last_error: LiteServerError | None = None
    # The port is free when picked but could be taken before Milvus binds it; try a few.
    for attempt in range(3):
        server = LiteServer(
            db_file=directory / f"milvus-test-{attempt}.db",
            address=f"127.0.0.1:{_free_port()}",
        )
        try:
            server.start(ready_timeout=ready_timeout)
        except LiteServerError as exc:
            last_error = exc
            continue
        atexit.register(server.stop)
        return server.uri, server.stop
    raise RuntimeError(f"could not start Milvus Lite for the tests: {last_error}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
