"""What the orchestrator adds to a turn of a real model (issue 22, Speed).

The real llama.cpp server with SmolLM2-135M (`testing/llama_server.py`, what CI installs) on
loopback, and the real product (`python app.py`) in front of it. Between the two sits a
recording relay (`Relay`: bytes forwarded as they come, each direction timed), so the bench
knows what the model itself took for each of the product's provider calls, and the exact body
the product sent. In one run, interleaved, N times:

  server   `POST /chat` with `Accept: text/event-stream` in a new session: request sent ->
           first `answer.delta` (time to first token) and -> `done` (the whole turn);
  direct   the body the product sent for the PREVIOUS turn, posted straight to llama.cpp
           (`stream: true`): request sent -> first content chunk. The previous turn's body, so
           that both calls find the model's prompt cache in the same state: the shared system
           prompt cached, the user's question new.

Reported:
  added to a turn   (server turn) - (the model's time: the relay's first request byte -> last
                    answer byte of each provider call), as a share of the turn. Target under 2%.
  added to TTFT     server time to first token - direct time to first token, p50. Target under 5 ms.

The relay's own hop (a thread handing bytes on, well under a millisecond) counts against the
product here, never for it. Turns whose reply was a command (two provider calls) count in the
first figure, not in the second.

    .venv/bin/python bench/real_model.py [--turns 12]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import SSEParser, p50_p95, percentile, start_server, stop_server  # noqa: E402
from storage.db import Database  # noqa: E402
from storage.sessions import create_session  # noqa: E402
from storage.users import create_user  # noqa: E402
from testing.llama_server import LlamaProcess  # noqa: E402

WARMUP = 2
QUESTIONS = (
    "In one short sentence: what colour is the sky on a clear day?",
    "In one short sentence: why do cats purr?",
    "In one short sentence: what is bread made from?",
    "In one short sentence: what does a bee make?",
    "In one short sentence: what is the capital of France?",
    "In one short sentence: why is the sea salty?",
)


@dataclass
class Exchange:
    """One provider call as the relay saw it (monotonic times)."""

    request: bytearray = field(default_factory=bytearray)
    first_request_byte: float = 0.0
    last_answer_byte: float = 0.0


class Relay:
    """A TCP relay to llama.cpp that records each connection's bytes and their times.

    The product keeps its provider connection alive, so one connection carries several calls;
    `take()` returns what was relayed since the last `take()` as one exchange per call, split
    where the product started writing again after an answer."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.exchanges: list[Exchange] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            state: dict[str, Exchange | None] = {"current": None}
            threading.Thread(target=self._pump_request, args=(client, upstream, state), daemon=True).start()
            threading.Thread(target=self._pump_answer, args=(upstream, client, state), daemon=True).start()

    def _pump_request(self, source: socket.socket, sink: socket.socket, state: dict[str, Exchange | None]) -> None:
        while data := _recv(source):
            now = time.monotonic()
            with self.lock:
                current = state["current"]
                if current is None or current.last_answer_byte:
                    current = Exchange(first_request_byte=now)
                    state["current"] = current
                    self.exchanges.append(current)
                current.request += data
            sink.sendall(data)
        _close(sink)

    def _pump_answer(self, source: socket.socket, sink: socket.socket, state: dict[str, Exchange | None]) -> None:
        while data := _recv(source):
            with self.lock:
                current = state["current"]
                if current is not None:
                    current.last_answer_byte = time.monotonic()
            sink.sendall(data)
        _close(sink)

    def take(self) -> list[Exchange]:
        with self.lock:
            taken, self.exchanges = self.exchanges, []
        return taken


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def request_body(raw: bytes) -> dict[str, Any]:
    _, _, body = raw.partition(b"\r\n\r\n")
    parsed: dict[str, Any] = json.loads(body)
    return parsed


def post_lines(port: int, path: str, body: dict[str, Any], headers: dict[str, str]) -> Iterator[Any]:
    """Yields the send time, then (line, receipt time) for each line of the answer."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    data = json.dumps(body).encode()
    sent = time.monotonic()
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json", **headers})
    response = conn.getresponse()
    if response.status != 200:
        raise SystemExit(f"{path}: HTTP {response.status} {response.read()[:300]!r}")
    yield sent
    while line := response.readline():
        yield line.decode(), time.monotonic()
    conn.close()


def server_turn(port: int, token: str, session_id: str, message: str) -> tuple[float, float | None, float]:
    """(sent, first answer.delta received or None, done received)."""
    lines = post_lines(
        port,
        "/chat",
        {"message": message, "session_id": session_id},
        {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
    )
    sent: float = next(lines)
    parser, first = SSEParser(), None
    for line, received in lines:
        frame = parser.line(line, received)
        if frame is None:
            continue
        if frame.name == "answer.delta" and first is None:
            first = received
        if frame.name == "error":
            raise SystemExit(f"turn failed: {frame.data[:300]}")
        if frame.name == "done":
            return sent, first, received
    raise SystemExit("the stream ended without done")


def direct_ttft(port: int, body: dict[str, Any]) -> float:
    """A streamed call straight to llama.cpp: request sent -> first content chunk."""
    lines = post_lines(port, "/v1/chat/completions", {**body, "stream": True}, {"Accept": "text/event-stream"})
    sent: float = next(lines)
    first = None
    for line, received in lines:
        if first is None and line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                if (choice.get("delta") or {}).get("content"):
                    first = received
    if first is None:
        raise SystemExit("the direct call streamed no content")
    return (first - sent) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=12, help="measured turns (after the warm-up)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        llama = LlamaProcess.start(Path(tmp) / "llama.log")
        relay = Relay(int(llama.base_url.split(":")[2].split("/")[0]))
        llama_port = relay.upstream_port
        database = Database(Path(tmp) / "real.db")
        database.migrate()
        with database.connection() as conn:
            user, token = create_user(conn, "bench")
            sessions = [create_session(conn, user.id, f"turn {i}").id for i in range(WARMUP + args.turns)]
        server, port = start_server(
            tmp,
            database.path,
            f"http://127.0.0.1:{relay.port}/v1",
            # plain answers: a command's answer comes from a second pass, not comparable with one
            # direct call (the demonstrations make this small model reach for commands)
            {"LLM_MODEL": llama.model, "LLM_TIMEOUT_S": "600", "PROMPT_DEMOS": "0"},
        )
        try:
            turns, model_times, shares, ttft_server, ttft_direct = [], [], [], [], []
            previous_body: dict[str, Any] | None = None
            commands = 0
            for i in range(WARMUP + args.turns):
                relay.take()
                sent, first, done = server_turn(port, token, sessions[i], QUESTIONS[i % len(QUESTIONS)])
                exchanges = relay.take()
                model_ms = sum((e.last_answer_byte - e.first_request_byte) * 1000 for e in exchanges)
                body = request_body(bytes(exchanges[0].request))
                direct = direct_ttft(llama_port, previous_body) if previous_body is not None else None
                previous_body = body
                if i < WARMUP:
                    continue
                turn_ms = (done - sent) * 1000
                turns.append(turn_ms)
                model_times.append(model_ms)
                shares.append((turn_ms - model_ms) / turn_ms * 100)
                if len(exchanges) > 1:
                    commands += 1
                elif first is not None and direct is not None:
                    ttft_server.append((first - sent) * 1000)
                    ttft_direct.append(direct)
        finally:
            stop_server(server)
            llama.stop()

    added = [turn - model for turn, model in zip(turns, model_times, strict=True)]
    print(
        f"real model: llama.cpp + {llama.model}, {args.turns} turns (after {WARMUP} warm-up), {commands} with a command\n"
    )
    print(f"  turn, via the server (ms)            {p50_p95(turns)}")
    print(f"  of which the model (ms)              {p50_p95(model_times)}")
    print(f"  added by the orchestrator (ms)       {p50_p95(added)}")
    print(
        f"  added, share of the turn (%)         p50 {percentile(shares, 0.5):.2f}  max {max(shares):.2f}  (target < 2%)"
    )
    if ttft_server:
        diff = [s - d for s, d in zip(ttft_server, ttft_direct, strict=True)]
        print(f"  time to first token, direct (ms)     {p50_p95(ttft_direct)}")
        print(f"  time to first token, server (ms)     {p50_p95(ttft_server)}")
        print(
            f"  added to TTFT (ms)                   p50 {percentile(ttft_server, 0.5) - percentile(ttft_direct, 0.5):+.2f}"
            f"  pairwise p50 {percentile(diff, 0.5):+.2f}  (target p50 < 5 ms)"
        )


if __name__ == "__main__":
    main()
