"""Free TCP ports on the loopback interface, for processes that must know each other's
addresses before any of them starts.

Most local-grid processes bind port 0 and announce the port they got. Operators cannot:
each one's config names its peers' URLs, so the ring's ports are chosen up front. The
sockets that found the ports stay open until all are chosen, so one call never hands
out the same port twice; another process may still grab one before its owner binds it,
which the launcher handles by retrying a start that fails to bind.
"""

from __future__ import annotations

import contextlib
import socket

LOOPBACK = "127.0.0.1"


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """`count` distinct ports that were free on `host` a moment ago."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def free_port(host: str = LOOPBACK) -> int:
    """One port that was free on `host` a moment ago."""
    return free_ports(1, host)[0]
