"""A real HTTP server on loopback that speaks the OpenAI and Ollama chat wire formats.

Tests and benchmarks point `LLM_BASE_URL` at it, so the product's own provider code makes
real HTTP calls; the server records every request body for assertions. Replies are queued
per server; `None` answers with null content, an `int` answers with that HTTP status, a
dict or list is sent verbatim as the message content (to test malformed replies), and
when the queue is empty `default_reply` is used. `POST …/images/generations` answers an
OpenAI-style `b64_json` PNG.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler
from typing import Any

from testing.loopback import LoopbackServer, QuietHandler

Reply = str | int | dict[str, Any] | list[Any] | None


def tiny_png(width: int = 2, height: int = 2) -> bytes:
    """A valid PNG, for the fake image endpoint and upload tests."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


class FakeLLMServer(LoopbackServer):
    def __init__(self, replies: Iterable[Reply] = (), *, default_reply: str = "ok", delay_s: float = 0.0) -> None:
        self._replies: deque[Reply] = deque(replies)
        self.default_reply = default_reply
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.get_paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        super().__init__()

    @property
    def openai_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def ollama_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self, *, default_reply: str = "ok", delay_s: float = 0.0) -> None:
        """Forget queued replies and recorded requests (one server shared by many tests)."""
        with self._lock:
            self._replies.clear()
            self.requests.clear()
            self.paths.clear()
            self.get_paths.clear()
            self.headers.clear()
        self.default_reply = default_reply
        self.delay_s = delay_s

    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def next_reply(self) -> Reply:
        with self._lock:
            return self._replies.popleft() if self._replies else self.default_reply

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(QuietHandler):

            def do_GET(self) -> None:  # noqa: N802 - model lists, as /health probes them
                with server._lock:
                    server.get_paths.append(self.path)
                if self.path.endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
                elif self.path.endswith("/api/tags"):
                    self._send(200, {"models": [{"name": "fake", "model": "fake"}]})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.paths.append(self.path)
                    server.headers.append(dict(self.headers.items()))
                if server.delay_s:
                    time.sleep(server.delay_s)
                if self.path.endswith("/images/generations"):
                    import base64

                    self._send(200, {"created": 0, "data": [{"b64_json": base64.b64encode(tiny_png()).decode()}]})
                    return
                reply = server.next_reply()
                if isinstance(reply, int):
                    self._send(reply, {"error": {"message": f"status {reply}"}})
                elif self.path.startswith("/api/chat"):
                    self._send(200, {"model": body.get("model"), "message": {"role": "assistant", "content": reply if reply is not None else ""}, "done": True})
                else:
                    self._send(200, {
                        "id": "chatcmpl-fake", "object": "chat.completion", "model": body.get("model"),
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
                    })

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
