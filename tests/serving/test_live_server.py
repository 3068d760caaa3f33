"""Live turns on the real server (uvicorn + the hand-off of `serving/asgi.py`), over real HTTP.

What only the real server can show: answers reach the client while the model is still
writing; open streams and waiting JSON requests hold no thread (a server with 4 request
threads serves hundreds of them and still answers `/health`); a client that never
finishes its request is cut at the deadline and costs others nothing; closing a stream
never stops its turn; Stop works across connections. No test asserts a wall-time bound:
speed lives in bench/. Each test runs on both backends of live state (in-process, Redis).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from testing.fake_llm import FakeLLMServer, StreamReply
from testing.waiting import HUNG_S, wait_until
from tests.process_support import ROOT, clean_env, free_port, stop_process, wait_until_serving

pytestmark = pytest.mark.slow

WEB_THREADS = 4


class LiveServer:
    def __init__(self, process: subprocess.Popen[Any], port: int, token: str, llm: FakeLLMServer) -> None:
        self.process, self.port, self.llm = process, port, llm
        self.base = f"http://127.0.0.1:{port}"
        self.auth = {"Authorization": f"Bearer {token}"}

    def threads(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        raise AssertionError("no thread count")

    def session(self) -> str:
        return requests.post(f"{self.base}/sessions", json={}, headers=self.auth, timeout=10).json()["id"]

    def active_turn(self, session_id: str) -> dict[str, Any] | None:
        return requests.get(f"{self.base}/sessions/{session_id}", headers=self.auth, timeout=10).json()["active_turn"]

    def wait_active(self, session_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + HUNG_S  # only stops a hung test
        while (turn := self.active_turn(session_id)) is None:
            assert time.monotonic() < deadline, "the turn never started"
            time.sleep(0.02)
        return turn


@pytest.fixture(scope="module", params=["memory", "redis"])
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The real server, with its live state in the process, then in Redis (REDIS_URL on a
    private redis-server, tests/redis_support.py): every test below runs on both."""
    tmp = tmp_path_factory.mktemp("live")
    settings = {"database_path": tmp / "app.db", "data_dir": tmp, "auth_token_file": tmp / "admin.token"}
    backend: dict[str, str] = {}
    if request.param == "redis":
        redis_server = request.getfixturevalue("redis_server")
        redis_server.flush()
        backend["REDIS_URL"] = redis_server.url
    port = free_port()
    with FakeLLMServer(default_reply="plain answer") as llm:
        env = clean_env(
            tmp,
            settings,
            PORT=str(port),
            LLM_PROVIDER="openai",
            LLM_BASE_URL=llm.openai_base_url,
            LLM_MODEL="m",
            WEB_THREADS=str(WEB_THREADS),
            HEADER_TIMEOUT_S="1",
            SSE_HEARTBEAT_S="1",
            # one user holds hundreds of streams and sends many turns here (limits: test_limits.py)
            MAX_STREAMS_PER_USER="1000",
            RATE_LIMITS="turns=off,sessions=off",
            **backend,
        )
        log = (tmp / "server.log").open("w")
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_serving(process, f"http://127.0.0.1:{port}/health", tmp / "server.log")
            yield LiveServer(process, port, (tmp / "admin.token").read_text().strip(), llm)
        finally:
            stop_process(process, log)


def sse_events(response: requests.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    name = None
    for line in response.iter_lines(chunk_size=None, decode_unicode=True):
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and name:
            yield name, json.loads(line[6:])
            name = None


def raw_stream(port: int, path: str, headers: dict[str, str]) -> socket.socket:
    """A GET of an event stream on its own socket, read until the first bytes of the body."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Accept: text/event-stream"]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    received = b""
    while b"retry:" not in received:
        chunk = sock.recv(4096)
        assert chunk, "the server closed the stream"
        received += chunk
    assert received.startswith(b"HTTP/1.1 200")
    return sock


def test_deltas_reach_the_client_while_the_model_is_still_writing(live: LiveServer):
    live.llm.queue(StreamReply(pieces=tuple(f"word{i} " for i in range(8)), delay_s=0.15))
    response = requests.post(
        f"{live.base}/chat",
        json={"message": "talk"},
        headers={**live.auth, "Accept": "text/event-stream"},
        stream=True,
        timeout=30,
    )
    shown, still_writing, done = "", None, None
    for name, data in sse_events(response):
        if name == "answer.delta":
            if still_writing is None:
                still_writing = not live.llm.answers[-1].completed  # read now, without waiting
            shown += data["text"]
        if name == "done":
            done = data
    assert still_writing is True, "the first delta arrived only after the model had finished"
    assert done is not None and done["reply"] == shown == "".join(f"word{i} " for i in range(8))


def test_waiting_json_turns_hold_no_request_thread(live: LiveServer):
    """Twenty slow JSON turns at once on a server with 4 request threads: all answer, and
    /health answers while they wait (a thread per waiting request would block it)."""
    for _ in range(20):
        live.llm.queue(StreamReply(pieces=("slow", " done"), delay_s=1.0))
    results: list[int] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                requests.post(f"{live.base}/chat", json={"message": "wait"}, headers=live.auth, timeout=60).status_code
            )
        )
        for _ in range(20)
    ]
    for thread in threads:
        thread.start()
    # as many turns waiting on the provider as the server has request threads: one thread per waiting
    # request would leave none for /health
    wait_until(lambda: live.llm.in_flight >= WEB_THREADS, "the turns never reached the provider")
    health = requests.get(f"{live.base}/health", timeout=30)
    for thread in threads:
        thread.join(60)
    assert health.status_code == 200 and results == [200] * 20


def test_idle_streams_hold_no_thread_and_all_end_with_the_turn(live: LiveServer):
    session_id = live.session()
    live.llm.queue(StreamReply(pieces=("never ends",), hang=True))
    turn_thread = threading.Thread(
        target=lambda: requests.post(
            f"{live.base}/chat", json={"message": "long", "session_id": session_id}, headers=live.auth, timeout=60
        )
    )
    turn_thread.start()
    turn = live.wait_active(session_id)
    before = live.threads()
    sockets = [
        raw_stream(live.port, f"/sessions/{session_id}/generate/stream?turn_id={turn['turn_id']}", live.auth)
        for _ in range(200)
    ]
    with_streams = live.threads()
    assert requests.get(f"{live.base}/health", timeout=30).status_code == 200
    assert with_streams - before <= 2, f"threads grew from {before} to {with_streams} with 200 open streams"
    requests.post(f"{live.base}/sessions/{session_id}/cancel", headers=live.auth, timeout=10)
    ended = 0
    for sock in sockets:
        data = b""
        sock.settimeout(10)
        while b"event: done" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        ended += b"event: done" in data
        sock.close()
    turn_thread.join(30)
    assert ended == 200


def test_requests_that_never_finish_their_head_cost_others_nothing_and_are_cut(live: LiveServer):
    slow = []
    for _ in range(300):
        sock = socket.create_connection(("127.0.0.1", live.port), timeout=10)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # and nothing more
        slow.append(sock)
    assert requests.get(f"{live.base}/health", timeout=30).status_code == 200
    cut = 0
    for sock in slow:
        sock.settimeout(10)
        try:
            cut += sock.recv(1024) == b""  # the server closed it at HEADER_TIMEOUT_S
        except (ConnectionResetError, TimeoutError):
            cut += 0
        sock.close()
    assert cut == 300


def test_closing_a_stream_never_stops_its_turn(live: LiveServer):
    session_id = live.session()
    pieces = tuple(f"part{i} " for i in range(6))
    live.llm.queue(StreamReply(pieces=pieces, delay_s=0.2))
    response = requests.post(
        f"{live.base}/chat",
        json={"message": "go", "session_id": session_id},
        headers={**live.auth, "Accept": "text/event-stream"},
        stream=True,
        timeout=30,
    )
    for name, _ in sse_events(response):
        if name == "answer.delta":
            break
    response.close()  # the tab closes
    wait_until(lambda: live.active_turn(session_id) is None, "the turn never ended")
    messages = requests.get(f"{live.base}/sessions/{session_id}/messages", headers=live.auth, timeout=10).json()
    answer = messages["messages"][-1]
    assert answer["role"] == "assistant" and answer["content"] == "".join(pieces)
    assert "stopped" not in answer.get("meta", {})  # whole: only which model answered it (meta.answered_by)


def test_stop_from_another_connection_keeps_what_was_shown(live: LiveServer):
    session_id = live.session()
    live.llm.queue(StreamReply(pieces=("Shown first. ", "Shown second. ", "Not yet."), delay_s=0.5))
    response = requests.post(
        f"{live.base}/chat",
        json={"message": "go", "session_id": session_id},
        headers={**live.auth, "Accept": "text/event-stream"},
        stream=True,
        timeout=30,
    )
    shown, done = "", None
    for name, data in sse_events(response):
        if name == "answer.delta":
            shown += data["text"]
            if "second" in shown:
                stop = requests.post(
                    f"{live.base}/sessions/{session_id}/cancel",
                    json={"turn_id": data["turn_id"]},
                    headers=live.auth,
                    timeout=10,
                )
                assert stop.status_code == 200
        if name == "done":
            done = data
    assert done is not None and done["stopped"] is True and "Not yet" not in shown
    meta = done["messages"][-1]["meta"]
    assert done["messages"][-1]["content"] == shown
    assert {key: meta[key] for key in ("stopped", "stop_reason")} == {"stopped": True, "stop_reason": "user"}
    assert live.llm.answer(-1).client_hung_up


def test_a_chunked_chat_request_is_answered(live: LiveServer):
    """`Transfer-Encoding: chunked` (no Content-Length), as a streaming HTTP client sends it:
    the body is read whole, not taken for an empty one."""
    body = json.dumps({"message": "hello in parts"}).encode()
    parts = iter([body[:5], body[5:17], body[17:]])
    answer = requests.post(
        f"{live.base}/chat", data=parts, headers={**live.auth, "Content-Type": "application/json"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["reply"] == "plain answer"


def test_a_chunked_multipart_chat_over_the_limit_answers_413(live: LiveServer):
    """The same for a multipart `POST /chat` (48 MiB: images), which is parsed as a form."""
    boundary = b"b0undary"
    head = b"--" + boundary + b'\r\nContent-Disposition: form-data; name="images[]"; filename="a.png"\r\n\r\n'
    parts = iter([head, *(b"x" * (1 << 20) for _ in range(50))])
    content_type = f"multipart/form-data; boundary={boundary.decode()}"
    try:
        answer = requests.post(
            f"{live.base}/chat", data=parts, headers={**live.auth, "Content-Type": content_type}, timeout=60
        )
    except requests.ConnectionError:
        pytest.fail("the server closed the connection before answering")
    assert answer.status_code == 413, answer.text
    assert answer.json()["error"]["code"] == "payload_too_large"


def test_a_chunked_body_over_the_limit_answers_413(live: LiveServer):
    """Werkzeug reads a body without Content-Length up to the endpoint's limit and stops; the
    app says 413 instead of parsing the cut body (8 MiB for every endpoint but /chat)."""
    parts = (b"[" * 65536 for _ in range(8 * 16 + 4))
    try:
        answer = requests.post(
            f"{live.base}/sessions", data=parts, headers={**live.auth, "Content-Type": "application/json"}, timeout=60
        )
    except requests.ConnectionError:  # answered and closed before the client had sent it all
        pytest.fail("the server closed the connection before answering")
    assert answer.status_code == 413, answer.text
    assert answer.json()["error"]["code"] == "payload_too_large"
    assert requests.get(f"{live.base}/health", timeout=10).status_code == 200
