"""A loopback HTTP proxy that adds `Authorization: Bearer <token>` to every request it forwards.

The MCP conformance suite (`tests/mcp_server/test_mcp_conformance.py`) cannot send a bearer
token, and `/mcp` refuses a request without one, so the suite talks to this proxy instead. Every
other header goes through unchanged, `Host` and `Origin` included: the suite's
`dns-rebinding-protection` scenario sends a foreign `Host`, and the server, not the proxy, must
refuse it. Bodies are read whole: `/mcp` answers JSON, never a long-lived event stream.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}
)
TIMEOUT_S = 60


def handler_for(upstream: str, token: str) -> type[BaseHTTPRequestHandler]:
    """A request handler forwarding to `upstream` (`http://host:port`) with the token added."""

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_BY_HOP}
            headers["Authorization"] = f"Bearer {token}"
            answer = requests.request(
                self.command, upstream + self.path, headers=headers, data=body, timeout=TIMEOUT_S, allow_redirects=False
            )
            self.send_response(answer.status_code)
            for name, value in answer.headers.items():
                if name.lower() not in HOP_BY_HOP and name.lower() != "content-encoding":
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = do_DELETE = do_OPTIONS = forward

        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet: the server's log says what happened

    return Forward


@contextmanager
def bearer_proxy(upstream: str, token: str, port: int) -> Iterator[str]:
    """A proxy on loopback `port` for as long as the block runs; yields its base URL. The port
    is the caller's choice: the server behind must know it first, to allow its `Origin`."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(upstream, token))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="bearer-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
