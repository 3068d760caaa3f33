"""The part every loopback fake shares: a threaded HTTP server on 127.0.0.1, started and
stopped as a context manager, with a quiet handler base that tolerates clients hanging up."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

POLL_INTERVAL_S = 0.02  # shutdown() waits for one poll: keep stopping a fake quick


class QuietHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else separate header/body writes meet delayed ACKs (+40 ms)

    def log_message(self, format: str, *args: Any) -> None:
        return

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            return  # the client hung up early on purpose (caps, deadlines)


class LoopbackServer(ABC):
    """Subclasses implement `_handler_class()` (a `QuietHandler` subclass) and keep state."""

    def __init__(self, port: int = 0) -> None:
        """`port` 0: a free one; a given port lets a test stop a server and start another in its place."""
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL_S}, daemon=True
        )

    @abstractmethod
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class, closing over this server's state."""

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
