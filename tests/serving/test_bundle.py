"""The page's bundle over real HTTP (issue 26, Speed): cache headers and compression.

Our JS and CSS have no build step, so no hashed names: each answer carries an ETag and
`Cache-Control: no-cache`, and a reload revalidates (304, no body). Text goes out gzipped
to a client that asks for it, and as it is to one that does not. Event streams never go
through the compressor: their frames still arrive one by one while the model is writing.
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from api.ui import PAGE_HEADERS, page_html
from testing.fake_llm import FakeLLMServer, StreamReply
from tests.process_support import ROOT, clean_env, free_port, stop_process, wait_until_serving

TEXT_ASSETS = {
    "/static/js/app.js": "text/javascript",
    "/static/js/live.js": "text/javascript",
    "/static/css/app.css": "text/css",
    "/static/vendor/highlight.min.js": "text/javascript",
    "/static/vendor/marked.esm.js": "text/javascript",
    "/": "text/html",
}


class Server:
    def __init__(self, port: int, token: str, llm: FakeLLMServer) -> None:
        self.port, self.llm = port, llm
        self.base = f"http://127.0.0.1:{port}"
        self.auth = {"Authorization": f"Bearer {token}"}

    def get(self, path: str, **headers: str) -> tuple[http.client.HTTPResponse, bytes]:
        """A GET with exactly these headers (no client adds an Accept-Encoding of its own)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        body = response.read()
        connection.close()
        return response, body

    def auth_lines(self) -> list[str]:
        return [f"{key}: {value}" for key, value in self.auth.items()]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("bundle")
    settings: dict[str, object] = {
        "database_path": tmp / "app.db",
        "data_dir": tmp,
        "auth_token_file": tmp / "admin.token",
    }
    port = free_port()
    with FakeLLMServer() as llm:
        env = clean_env(
            tmp,
            settings,
            PORT=str(port),
            LLM_PROVIDER="openai",
            LLM_BASE_URL=llm.openai_base_url,
            LLM_MODEL="m",
            RATE_LIMITS="turns=off,sessions=off",
        )
        log = (tmp / "server.log").open("w")
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_serving(process, f"http://127.0.0.1:{port}/health", tmp / "server.log")
            yield Server(port, (tmp / "admin.token").read_text().strip(), llm)
        finally:
            stop_process(process, log)


def source(path: str) -> bytes:
    if path == "/":  # index.html with the module preloads written in (api/ui.py)
        return page_html(ROOT / "static").encode()
    return (ROOT / "static" / path.removeprefix("/static/")).read_bytes()


@pytest.mark.parametrize("path", list(TEXT_ASSETS))
def test_text_assets_are_gzipped_for_clients_that_accept_it(server: Server, path: str) -> None:
    response, body = server.get(path, **{"Accept-Encoding": "gzip, deflate, br"})
    assert response.status == 200
    assert response.getheader("Content-Encoding") == "gzip"
    assert "Accept-Encoding" in (response.getheader("Vary") or "")
    assert response.getheader("Content-Type", "").startswith(TEXT_ASSETS[path])
    assert gzip.decompress(body) == source(path)
    assert len(body) < len(source(path))


@pytest.mark.parametrize("path", list(TEXT_ASSETS))
def test_text_assets_are_plain_without_accept_encoding(server: Server, path: str) -> None:
    response, body = server.get(path)
    assert response.status == 200
    assert response.getheader("Content-Encoding") is None
    assert response.getheader("Content-Type", "").startswith(TEXT_ASSETS[path])
    assert body == source(path)


@pytest.mark.parametrize("path", list(TEXT_ASSETS))
def test_a_reload_revalidates_and_gets_304_without_a_body(server: Server, path: str) -> None:
    first, _ = server.get(path, **{"Accept-Encoding": "gzip"})
    etag = first.getheader("ETag")
    assert etag and first.getheader("Cache-Control") == "no-cache"
    again, body = server.get(path, **{"Accept-Encoding": "gzip", "If-None-Match": etag})
    assert again.status == 304 and body == b""
    assert again.getheader("ETag") == etag


def test_the_page_keeps_its_security_headers_when_compressed(server: Server) -> None:
    response, _ = server.get("/", **{"Accept-Encoding": "gzip"})
    assert response.getheader("Content-Encoding") == "gzip"
    for name, value in PAGE_HEADERS.items():
        assert response.getheader(name) == value, name


def test_images_and_api_answers_are_not_compressed(server: Server) -> None:
    response, _ = server.get("/api/me", **{"Accept-Encoding": "gzip", **server.auth})
    assert response.getheader("Content-Encoding") is None


def first_frame(sock: socket.socket, marker: bytes) -> bytes:
    received = b""
    while marker not in received:
        chunk = sock.recv(4096)
        assert chunk, f"the server closed the stream before {marker!r}"
        received += chunk
    return received


def raw_request(server: Server, method: str, path: str, body: dict[str, Any] | None, **headers: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    data = json.dumps(body).encode() if body is not None else b""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Accept-Encoding: gzip, br", *server.auth_lines()]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
    return sock


@pytest.mark.parametrize(
    ("method", "path", "body", "accept", "marker"),
    [
        ("POST", "/chat", {"message": "talk"}, "text/event-stream", b"answer.delta"),
        (
            "POST",
            "/v1/chat/completions",
            {"model": "orchestrator", "stream": True, "messages": [{"role": "user", "content": "talk"}]},
            "text/event-stream",
            b"first words",
        ),
    ],
)
def test_event_streams_stay_unbuffered_and_uncompressed(
    server: Server, method: str, path: str, body: dict[str, Any], accept: str, marker: bytes
) -> None:
    """The model wrote its first words and then hangs: they must reach the client anyway,
    as plain text (a compressor would hold them until its block fills or the stream ends)."""
    server.llm.reset()
    server.llm.queue(StreamReply(pieces=("first words ",), hang=True))
    sock = raw_request(server, method, path, body, Accept=accept)
    try:
        received = first_frame(sock, marker)
        head = received.split(b"\r\n\r\n", 1)[0].lower()
        assert b"content-type: text/event-stream" in head
        assert b"content-encoding" not in head
        assert not server.llm.answers[-1].completed, "the model was still writing"
    finally:
        sock.close()


def test_the_session_event_stream_is_not_compressed(server: Server) -> None:
    session = requests.post(f"{server.base}/sessions", json={}, headers=server.auth, timeout=10).json()["id"]
    sock = raw_request(server, "GET", f"/sessions/{session}/generate/stream", None, Accept="text/event-stream")
    try:
        head = first_frame(sock, b"\r\n\r\n").split(b"\r\n\r\n", 1)[0].lower()
        assert head.startswith(b"http/1.1 200")
        assert b"content-type: text/event-stream" in head and b"content-encoding" not in head
    finally:
        sock.close()
