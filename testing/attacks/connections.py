"""Attacks on the HTTP layer itself, before any login: a request head that never ends."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from testing.attacks import Attack, Outcome, Target

FLOOD_S = 5.0  # how long the attacker keeps sending
FLOOD_BYTES = 200_000_000


def _flood_head(target: Target, chunk: Callable[[int], bytes]) -> Outcome:
    """Send a request line, then head bytes until the server closes the connection (or
    FLOOD_S pass); the outcome is the status the server answered (0: none was read)."""
    sock = socket.create_connection(("127.0.0.1", target.server.port), timeout=10)
    sent, start = 0, time.monotonic()
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        while time.monotonic() - start < FLOOD_S and sent < FLOOD_BYTES:
            data = chunk(sent)
            sock.sendall(data)
            sent += len(data)
    except OSError:
        pass  # the server closed the connection
    answer = b""
    try:
        answer = sock.recv(4096)
    except OSError:
        pass  # reset: the close came while our bytes were still arriving
    finally:
        sock.close()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return Outcome(status, len(answer), f"sent {sent / 1e6:.1f} MB before the server closed")


def many_headers(target: Target) -> Outcome:
    return _flood_head(target, lambda sent: b"".join(b"X-%d: %s\r\n" % (sent + i, b"a" * 100) for i in range(1000)))


def endless_header(target: Target) -> Outcome:
    return _flood_head(target, lambda sent: (b"X-long: " if sent == 0 else b"") + b"a" * 100_000)


ATTACKS = [
    Attack("http: a head of endless small headers (no login)", many_headers, deadline_s=0.5),
    Attack("http: one header that never ends (no login)", endless_header, deadline_s=0.5),
]
