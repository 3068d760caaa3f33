"""A loopback HTTP server that answers with scripted raw bytes, for byte-level provider tests.

`RawHTTPServer(answers)` reads each request (head and `Content-Length` body), records it,
and answers with the next scripted answer in ONE `sendall` (a whole stream at once, as a
fast server's burst arrives). It counts the connections it accepted, so a test can tell
whether one was reused.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def chunked(parts: list[bytes]) -> bytes:
    """`parts` as a chunked body, each part one chunk."""
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


def sse_reply(*pieces: str) -> bytes:
    """A whole OpenAI-style streamed reply: head, one chunk per event, `[DONE]`."""
    events = [{"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]} for piece in pieces]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body = [b"data: " + json.dumps(event).encode() + b"\n\n" for event in events] + [b"data: [DONE]\n\n"]
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + chunked(body)


class RawHTTPServer:
    def __init__(self, answers: list[bytes], *, close_after: bool = False) -> None:
        self.answers = list(answers)
        self.close_after = close_after
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body) of each request, in order
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            received = b""
            while self.answers:
                while _request_length(received) is None:
                    data = conn.recv(65536)
                    if not data:
                        return
                    received += data
                length = _request_length(received)
                assert length is not None
                head, _, rest = received.partition(b"\r\n\r\n")
                body_length = length - len(head) - 4
                self.requests.append((head, rest[:body_length]))
                received = received[length:]
                conn.sendall(self.answers.pop(0))
                if self.close_after:
                    return

    def close(self) -> None:
        self.answers.clear()
        self._listener.close()


def _request_length(received: bytes) -> int | None:
    """The length of the first whole request in `received` (head, blank line, body), or None."""
    head, found, rest = received.partition(b"\r\n\r\n")
    if not found:
        return None
    fields = head.lower().split(b"content-length:")
    body = int(fields[1].split(b"\r\n")[0]) if len(fields) > 1 else 0
    return len(head) + 4 + body if len(rest) >= body else None


@contextmanager
def raw_servers() -> Iterator[type[RawHTTPServer]]:
    """Start servers with `start(answers, **options)`; all are closed at the end."""
    servers: list[RawHTTPServer] = []

    def start(answers: list[bytes], **options: bool) -> RawHTTPServer:
        server = RawHTTPServer(answers, **options)
        servers.append(server)
        return server

    try:
        yield start  # type: ignore[misc]
    finally:
        for server in servers:
            server.close()
