"""Loopback sockets for the fake servers of the tests.

A fake server binds to an ephemeral port unless FAKE_SERVER_PORTS names a range ("18100-18199"):
on a machine shared with other test runs, servers then stay inside the ports set aside for them.
The socket is bound here and handed to the server, so no other process can take the port between
choosing it and listening on it.
"""

from __future__ import annotations

import os
import socket


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
