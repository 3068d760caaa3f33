"""A recording reverse proxy: what a client (Open WebUI) sends to our `/v1`, written down.

Sits between Open WebUI and the orchestrator: every request is forwarded unchanged and the
answer relayed as it arrives (chunk by chunk, so streaming stays streaming), while the
request (method, path, headers, JSON body) is appended to a JSON-lines file. The bearer
token is replaced by `<token>` in the record. Used by `scripts/openwebui_check.py` to record
the fixtures of `tests/api/test_openwebui_requests.py` from a real Open WebUI.

    python scripts/openwebui_proxy.py --listen 19302 --upstream http://127.0.0.1:19301 --out requests.jsonl
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
MAX_BODY = 8 * 1024 * 1024


def redacted(headers: dict[str, str]) -> dict[str, str]:
    return {name: ("Bearer <token>" if name.lower() == "authorization" else value) for name, value in headers.items()}


class Recorder:
    """Appends one JSON line per request; one lock, so concurrent requests never interleave."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()

    def write(self, entry: dict[str, Any]) -> None:
        with self.lock, self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry, ensure_ascii=False) + "\n")


def make_handler(upstream: str, recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    target = urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(length, MAX_BODY)) if length else b""
            headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_HEADERS}
            try:
                parsed: Any = json.loads(body) if body else None
            except ValueError:
                parsed = body.decode("utf-8", "replace")
            recorder.write({"method": self.command, "path": self.path, "headers": redacted(headers), "body": parsed})
            assert target.hostname is not None  # checked when the proxy was started
            upstream_conn = http.client.HTTPConnection(target.hostname, target.port, timeout=300)
            try:
                upstream_conn.request(self.command, self.path, body=body or None, headers=headers)
                answer = upstream_conn.getresponse()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in HOP_HEADERS and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                while piece := answer.read1(65536):
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            finally:
                upstream_conn.close()
            self.close_connection = True

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = relay

    return Handler


def serve(listen: int, upstream: str, out: Path) -> ThreadingHTTPServer:
    """Start the proxy on `127.0.0.1:listen` in a daemon thread; `shutdown()` stops it."""
    server = ThreadingHTTPServer(("127.0.0.1", listen), make_handler(upstream, Recorder(out)))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.listen), make_handler(args.upstream, Recorder(args.out)))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
