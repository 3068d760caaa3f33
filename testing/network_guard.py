"""Tests never reach the network: a socket may connect to loopback addresses only.

The test process patches `socket.socket.connect` per test (tests/conftest.py); a server
subprocess started by a test installs the same guard at start-up through a `sitecustomize`
that calls `install()` (tests/llm/test_llm_real.py), since a real model may write any command.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

_real_connect = socket.socket.connect


def loopback_only(self: socket.socket, address: Any) -> Any:
    host = address[0] if isinstance(address, tuple) else None
    if host is not None:
        try:
            allowed = ipaddress.ip_address(host).is_loopback
        except ValueError:
            allowed = host == "localhost"
        if not allowed:
            raise ConnectionRefusedError(f"tests may not reach the network ({host})")
    return _real_connect(self, address)


def install() -> None:
    socket.socket.connect = loopback_only  # type: ignore[method-assign, assignment]  # the test-wide network guard patches the class on purpose
