"""A real HTTP server on loopback that serves scripted pages, for the web tools' tests.

Routes map a path (without query) to a `Page`: status, headers, body, and optional pacing
(`drip_s` sends the body one chunk at a time with a pause, to test deadlines). Every request
is recorded (path with query, headers) so tests can check what the product sent, e.g. the
Host header. Unknown paths answer 404.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from testing.loopback import LoopbackServer, QuietHandler


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


class FakeWebServer(LoopbackServer):
    def __init__(self, routes: dict[str, Page] | None = None) -> None:
        self.routes: dict[str, Page] = dict(routes or {})
        self.requests: list[Recorded] = []
        super().__init__()

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(QuietHandler):
            def _serve(self, method: str) -> None:
                with server._lock:
                    server.requests.append(Recorded(method, self.path, dict(self.headers.items())))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                page = server.routes.get(
                    urlsplit(self.path).path, Page(b"not found", status=404, content_type="text/plain")
                )
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
                            self.wfile.write(body[index : index + 1])
                            self.wfile.flush()
                            time.sleep(page.drip_s)
                    else:
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    return
                if not page.send_length:
                    self.close_connection = True

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

        return Handler
