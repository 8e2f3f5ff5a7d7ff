"""Loopback sockets for the fake servers of the tests.

A fake server binds to an ephemeral port unless FAKE_SERVER_PORTS names a range ("18100-18199"):
on a machine shared with other test runs, servers then stay inside the ports set aside for them.
The socket is bound here and handed to the server, so no other process can take the port between
choosing it and listening on it.
"""

from __future__ import annotations

import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def loopback_socket() -> socket.socket:
    """A TCP socket bound to 127.0.0.1, not yet listening."""
    low, high = _port_range()
    for port in range(low, high + 1):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue
        return sock
    raise OSError(f"no free port on 127.0.0.1 in {low}-{high}")


def _port_range() -> tuple[int, int]:
    configured = os.environ.get("FAKE_SERVER_PORTS", "").strip()
    if not configured:
        return 0, 0
    low, _sep, high = configured.partition("-")
    return int(low), int(high or low)


class LoopbackHTTPServer:
    """A threading HTTP server on a `loopback_socket()`, served on a daemon thread until `stop()`.

    `quiet`: a client hanging up mid-answer is not reported (for fakes whose clients time out
    on purpose)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], *, name: str, quiet: bool = False) -> None:
        server_class = _QuietServer if quiet else _Server
        httpd = server_class(("127.0.0.1", 0), handler, bind_and_activate=False)
        httpd.socket.close()
        httpd.socket = loopback_socket()
        httpd.server_address = httpd.socket.getsockname()
        httpd.server_activate()
        self.httpd = httpd
        # A short poll interval keeps shutdown (once per test) fast.
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, name=name,
                                        daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


class _QuietServer(_Server):
    def handle_error(self, request, client_address) -> None:
        return
