"""The WSGI bridge (`serving/wsgi_bridge.py`) under a real uvicorn, over real sockets.

A small Flask app of its own (not the product) shows each rule: a body sent in many parts
reaches the app whole; the environ follows PEP 3333; a long answer arrives whole in
batches, made in the request's one context whichever thread takes each batch, and its
iterable is closed; a client that leaves in the middle of a long answer
gets its iterable closed; an event stream is handed on chunk by chunk, not batched; a
request whose body came in parts leaves no Flask context behind on its keep-alive
connection.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import requests
import uvicorn
from flask import Flask, Response, g, request

from serving.asgi import OrchestratorApp
from serving.wsgi_bridge import BATCH_BYTES
from testing.waiting import wait_until
from tests.process_support import free_port

BIG = 3 * 1024 * 1024  # sent by the client in many TCP segments: several ASGI body parts
LIMIT = 4 * 1024 * 1024  # the probe app's MAX_CONTENT_LENGTH
BODY_OF: contextvars.ContextVar[str] = contextvars.ContextVar("body_of")  # set while a body is made


class Probe:
    """What the app saw, for the assertions."""

    def __init__(self) -> None:
        self.closed: list[str] = []
        self.environ: dict[str, object] = {}
        self.release_second_event = threading.Event()


def probe_app(probe: Probe) -> Flask:
    app = Flask("bridge-probe")
    app.config["MAX_CONTENT_LENGTH"] = LIMIT

    @app.post("/echo")
    def echo() -> dict[str, object]:
        g.marker = "set by /echo"
        data = request.get_data()
        return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    @app.get("/context")
    def context() -> dict[str, object]:
        return {"marker": g.get("marker")}

    @app.get("/environ/<path:rest>")
    def environ(rest: str) -> dict[str, object]:
        keys = ("PATH_INFO", "QUERY_STRING", "REQUEST_METHOD", "REMOTE_ADDR", "HTTP_X_TWICE", "SERVER_PROTOCOL")
        probe.environ = {key: request.environ.get(key) for key in keys}
        return {"rest": rest, "args": request.args.to_dict(flat=False)}

    def counted(name: str, chunks: Iterator[bytes]) -> Iterator[bytes]:
        token = BODY_OF.set(name)  # reset below: fails if a later batch ran in another context
        try:
            for chunk in chunks:
                assert BODY_OF.get() == name
                yield chunk
        finally:
            BODY_OF.reset(token)
            probe.closed.append(name)

    @app.get("/long")
    def long() -> Response:
        size = int(request.args["size"])
        pattern = bytes(range(256)) * 256  # 64 KiB
        chunks = (pattern[: min(len(pattern), size - start)] for start in range(0, size, len(pattern)))
        return Response(counted("long", chunks), mimetype="application/octet-stream")

    @app.get("/endless")
    def endless() -> Response:
        def forever() -> Iterator[bytes]:
            while True:
                yield b"x" * 65536

        return Response(counted("endless", forever()), mimetype="application/octet-stream")

    @app.get("/events")
    def events() -> Response:
        def frames() -> Iterator[bytes]:
            yield b"data: first\n\n"
            probe.release_second_event.wait(10)  # sent only once the client has the first
            yield b"data: second\n\n"

        return Response(counted("events", frames()), mimetype="text/event-stream")

    return app


@pytest.fixture
def served() -> Iterator[tuple[str, Probe]]:
    probe = Probe()
    port = free_port()
    config = uvicorn.Config(
        OrchestratorApp(probe_app(probe), threads=4),
        host="127.0.0.1",
        port=port,
        loop="asyncio",
        lifespan="on",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, "uvicorn started", timeout_s=10)
    try:
        yield f"http://127.0.0.1:{port}", probe
    finally:
        probe.release_second_event.set()
        server.should_exit = True
        thread.join(timeout=15)


def test_a_body_sent_in_many_parts_reaches_the_app_whole(served: tuple[str, Probe]) -> None:
    base, _ = served
    body = bytes(i * 7 % 251 for i in range(BIG))
    answer = requests.post(f"{base}/echo", data=body, timeout=30).json()
    assert answer == {"size": BIG, "sha256": hashlib.sha256(body).hexdigest()}


def test_a_chunked_request_body_reaches_the_app_whole(served: tuple[str, Probe]) -> None:
    base, _ = served
    parts = [bytes([n]) * 70_000 for n in range(20)]
    answer = requests.post(f"{base}/echo", data=iter(parts), timeout=30).json()  # Transfer-Encoding: chunked
    whole = b"".join(parts)
    assert answer == {"size": len(whole), "sha256": hashlib.sha256(whole).hexdigest()}


def test_a_chunked_request_body_is_never_read_past_the_limit(served: tuple[str, Probe]) -> None:
    """Werkzeug bounds a body without Content-Length by MAX_CONTENT_LENGTH: it reads the first
    LIMIT bytes (or answers 413), never the rest, so memory stays bounded."""
    base, _ = served
    parts = (b"z" * 65536 for _ in range(LIMIT // 65536 + 64))
    try:
        answer = requests.post(f"{base}/echo", data=parts, timeout=30)
        assert answer.status_code == 413 or answer.json()["size"] <= LIMIT
    except requests.ConnectionError:  # the server answered and closed before the client had sent it all
        pass
    assert requests.post(f"{base}/echo", data=b"ok", timeout=10).json()["size"] == 2  # still serving


def test_no_flask_context_outlives_its_request_on_a_kept_alive_connection(served: tuple[str, Probe]) -> None:
    base, _ = served
    with requests.Session() as http:
        for _ in range(3):  # a body in parts: the thread pulls the rest from the loop
            assert http.post(f"{base}/echo", data=b"y" * BIG, timeout=30).json()["size"] == BIG
            assert http.get(f"{base}/context", timeout=10).json() == {"marker": None}


def test_the_environ_follows_pep_3333(served: tuple[str, Probe]) -> None:
    base, probe = served
    raw = socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=10)
    with raw:
        raw.sendall(
            b"GET /environ/caf%C3%A9/x?a=1&a=2&b=%20 HTTP/1.1\r\nHost: t\r\n"
            b"X-Twice: one\r\nX-Twice: two\r\nConnection: close\r\n\r\n"
        )
        reply = b""
        while chunk := raw.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200")
    assert probe.environ == {
        "PATH_INFO": "/environ/café/x".encode().decode("latin1"),  # PEP 3333: bytes as latin-1
        "QUERY_STRING": "a=1&a=2&b=%20",
        "REQUEST_METHOD": "GET",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_X_TWICE": "one,two",
        "SERVER_PROTOCOL": "HTTP/1.1",
    }
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1]) == {"rest": "café/x", "args": {"a": ["1", "2"], "b": [" "]}}


@pytest.mark.parametrize("size", [0, 10, BATCH_BYTES - 1, BATCH_BYTES, 5 * BATCH_BYTES + 123])
def test_a_long_answer_arrives_whole_and_its_iterable_is_closed(served: tuple[str, Probe], size: int) -> None:
    base, probe = served
    pattern = bytes(range(256)) * 256
    expected = b"".join(pattern[: min(len(pattern), size - start)] for start in range(0, size, len(pattern)))
    answer = requests.get(f"{base}/long", params={"size": size}, timeout=30)
    assert answer.status_code == 200 and answer.content == expected
    wait_until(lambda: probe.closed == ["long"], "the body closed", timeout_s=5)


def test_a_client_leaving_a_long_answer_closes_its_iterable(served: tuple[str, Probe]) -> None:
    base, probe = served
    with requests.get(f"{base}/endless", stream=True, timeout=30) as answer:
        assert len(answer.raw.read(3 * BATCH_BYTES)) == 3 * BATCH_BYTES
    wait_until(lambda: probe.closed == ["endless"], "the body closed", timeout_s=10)


def test_an_event_stream_is_handed_on_chunk_by_chunk(served: tuple[str, Probe]) -> None:
    base, probe = served
    started = time.monotonic()
    with requests.get(f"{base}/events", stream=True, timeout=30) as answer:
        lines = answer.iter_lines()
        assert next(lines) == b"data: first"  # before the app has made the second frame
        assert time.monotonic() - started < 9  # not held until the app's 10 s wait ran out
        probe.release_second_event.set()
        assert [line for line in lines if line] == [b"data: second"]
    wait_until(lambda: probe.closed == ["events"], "the body closed", timeout_s=5)
