"""A real HTTP server on loopback that serves scripted pages, for the web tools' tests.

Routes map a path (without query) to a `Page`: status, headers, body, and optional pacing
(`drip_s` sends the body one chunk at a time with a pause, to test deadlines). Every request
is recorded (path with query, headers) so tests can check what the product sent, e.g. the
Host header. Unknown paths answer 404.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Page:
    body: bytes | str = b""
    status: int = 200
    content_type: str | None = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    drip_s: float = 0.0  # pause between 1-byte chunks of the body
    send_length: bool = True


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]


class FakeWebServer:
    def __init__(self, routes: dict[str, Page] | None = None) -> None:
        self.routes: dict[str, Page] = dict(routes or {})
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def __enter__(self) -> FakeWebServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence access log
                return

            def handle(self) -> None:
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client hung up early on purpose (caps, deadlines)

            def _serve(self, method: str) -> None:
                with server._lock:
                    server.requests.append(Recorded(method, self.path, dict(self.headers.items())))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                page = server.routes.get(urlsplit(self.path).path, Page(b"not found", status=404, content_type="text/plain"))
                body = page.body.encode() if isinstance(page.body, str) else page.body
                self.send_response(page.status)
                if page.content_type:
                    self.send_header("Content-Type", page.content_type)
                for name, value in page.headers.items():
                    self.send_header(name, value)
                if page.send_length:
                    self.send_header("Content-Length", str(len(body)))
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                try:
                    if page.drip_s:
                        for index in range(len(body)):
                            self.wfile.write(body[index:index + 1])
                            self.wfile.flush()
                            time.sleep(page.drip_s)
                    else:
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    return
                if not page.send_length:
                    self.close_connection = True

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                self._serve("POST")

        return Handler
