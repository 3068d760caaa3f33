"""What streaming a turn through the orchestrator costs (issue: live turns, Speed).

On loopback, in one run, against a fake OpenAI-compatible provider that streams 200 tokens
at 50 tokens/s (one piece every 20 ms, the first after 20 ms too):

  a. time to first token, N times each, interleaved:
     direct   a streamed POST straight to the fake (`/v1/chat/completions`, `stream: true`)
              sending the exact body the server sent for the previous turn; request sent ->
              first content chunk;
     server   `POST /chat` with `Accept: text/event-stream` on the real server (`python
              app.py`); request sent -> first `answer.delta`.
     Target: server p50 under 5 ms more than direct. Also: each token's relay delay, from
     the fake writing it (`AnswerLog.sent_at`) to the client reading it, both ways, and the
     time to the last token.
  b. a body-less command reply: `/remember …`, a newline, then 200 more pieces over 4 s
     the model "would go on" with. Measured: the first line's newline leaving the fake ->
     `tool.started` reaching the client (target p50 under 5 ms), split at the event's
     publication (`: ts=`); and the provider pieces never sent because the server closed the
     stream (`AnswerLog.pieces_sent` vs the script's length).

    .venv/bin/python bench/streaming.py [--turns 30] [--tokens 200] [--rate 50]
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import Frame, SSEParser, p50_p95, percentile, start_server, stop_server  # noqa: E402
from storage.db import Database  # noqa: E402
from storage.sessions import create_session  # noqa: E402
from storage.users import create_user  # noqa: E402
from testing.fake_llm import AnswerLog, FakeLLMServer, StreamReply  # noqa: E402

WARMUP = 3


def tokens(count: int, first: str = "Streaming") -> tuple[str, ...]:
    return (first, *(f" tok{i}" for i in range(1, count)))


class Client:
    """One kept-alive connection; POSTs whose answer is read line by line as it arrives."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def post_lines(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> Iterator[Any]:
        """Yields the send time, then (line, receipt time) for each line of the answer."""
        data = json.dumps(body).encode()
        sent = time.monotonic()
        self.conn.request("POST", path, body=data, headers={"Content-Type": "application/json", **headers})
        response = self.conn.getresponse()
        if response.status != 200:
            raise SystemExit(f"{path}: HTTP {response.status} {response.read()[:300]!r}")
        yield sent
        while True:
            line = response.readline()
            if not line:
                break
            yield line.decode(), time.monotonic()
        response.read()


def direct_call(client: Client, body: dict[str, Any]) -> tuple[float, list[tuple[str, float]]]:
    """A streamed call to the fake: (send time, [(content piece, receipt time)])."""
    lines = client.post_lines("/v1/chat/completions", {**body, "stream": True}, {"Accept": "text/event-stream"})
    sent = next(lines)
    pieces: list[tuple[str, float]] = []
    for line, received in lines:
        if not line.startswith("data: ") or line.startswith("data: [DONE]"):
            continue
        chunk = json.loads(line[6:])
        for choice in chunk.get("choices", []):
            content = (choice.get("delta") or {}).get("content")
            if content:
                pieces.append((content, received))
    return sent, pieces


def server_turn(client: Client, token: str, session_id: str, message: str) -> tuple[float, list[Frame]]:
    """A streamed `POST /chat`: (send time, its frames up to `done`)."""
    lines = client.post_lines(
        "/chat",
        {"message": message, "session_id": session_id},
        {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
    )
    sent = next(lines)
    parser, frames = SSEParser(), []
    for line, received in lines:
        frame = parser.line(line, received)
        if frame is not None:
            frames.append(frame)
            if frame.name in ("done", "error"):
                if frame.name == "error":
                    raise SystemExit(f"turn failed: {frame.data[:300]}")
    return sent, frames


def published(frames: list[Frame], name: str) -> float:
    """The server's publication time (`: ts=`, time.time()) of the first frame named `name`."""
    frame = next(frame for frame in frames if frame.name == name)
    assert frame.ts is not None, f"{name} has no ts comment"
    return frame.ts


def piece_delays(log: AnswerLog, script: tuple[str, ...], received: list[tuple[int, float]]) -> list[float]:
    """Per piece: fake wrote it (sent_at) -> client read the text that completes it, in ms.
    `received` is (text length so far, receipt time), so a delta holding several pieces
    counts for each of them."""
    ends, total = [], 0
    for piece in script[: log.pieces_sent]:
        total += len(piece)
        ends.append(total)
    delays, index = [], 0
    for length, at in received:
        while index < len(ends) and ends[index] <= length:
            delays.append((at - log.sent_at[index]) * 1000)
            index += 1
    return delays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=30, help="samples of each measure")
    parser.add_argument("--tokens", type=int, default=200, help="tokens per streamed answer")
    parser.add_argument("--rate", type=float, default=50.0, help="tokens per second")
    args = parser.parse_args()
    delay = 1 / args.rate
    answer = StreamReply(tokens(args.tokens), delay_s=delay)
    fact_tail = tokens(args.tokens, " and")  # what the model would have gone on with
    command_pieces = ("/remember", " the user likes green tea", "\n", *fact_tail)

    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(default_reply="Noted.") as llm:
        database = Database(Path(tmp) / "streaming.db")
        database.migrate()
        with database.connection() as conn:
            user, token = create_user(conn, "bench")
            session_a = create_session(conn, user.id, "answers").id
            session_b = create_session(conn, user.id, "commands").id
        server, port = start_server(tmp, database.path, llm.openai_base_url)
        try:
            to_server, to_fake = Client(port), Client(llm.port)
            clock = time.time() - time.monotonic()  # server ts (time.time()) -> this monotonic clock
            to_started, to_request, request_to_piece = [], [], []  # the server's time to first token, split
            ttft_direct, ttft_server, last_direct, last_server = [], [], [], []
            relay_direct, relay_server, before_first_direct, before_first_server = [], [], [], []
            pacing_direct, pacing_server = [], []  # the fake's first piece -> last piece
            for i in range(WARMUP + args.turns):
                # server turn: request -> first answer.delta
                llm.queue(answer)
                index = len(llm.answers)
                sent, frames = server_turn(to_server, token, session_a, f"tell me a story {i}")
                log = llm.answer(index)
                deltas, length = [], 0
                for frame in frames:
                    if frame.name == "answer.delta":
                        length += len(frame.json()["text"])
                        deltas.append((length, frame.received))
                body = llm.requests[index]  # the exact body this turn sent: same size, same work
                # direct call with that body
                llm.queue(answer)
                d_index = len(llm.answers)
                d_sent, pieces = direct_call(to_fake, body)
                d_log = llm.answer(d_index)
                d_received, length = [], 0
                for text, at in pieces:
                    length += len(text)
                    d_received.append((length, at))
                if i < WARMUP:
                    continue
                ttft_server.append((deltas[0][1] - sent) * 1000)
                ttft_direct.append((d_received[0][1] - d_sent) * 1000)
                last_server.append((deltas[-1][1] - sent) * 1000)
                last_direct.append((d_received[-1][1] - d_sent) * 1000)
                before_first_server.append((log.sent_at[0] - sent) * 1000)
                started = published(frames, "turn.started") - clock
                requested = published(frames, "provider.request") - clock
                to_started.append((started - sent) * 1000)
                to_request.append((requested - started) * 1000)
                request_to_piece.append((log.sent_at[0] - requested) * 1000)
                before_first_direct.append((d_log.sent_at[0] - d_sent) * 1000)
                pacing_server.append((log.sent_at[-1] - log.sent_at[0]) * 1000)
                pacing_direct.append((d_log.sent_at[-1] - d_log.sent_at[0]) * 1000)
                relay_server += piece_delays(log, answer.pieces, deltas)
                relay_direct += piece_delays(d_log, answer.pieces, d_received)
                if length != len(answer.text) or deltas[-1][0] != len(answer.text):
                    raise SystemExit("an answer arrived incomplete")

            # b. body-less command: newline leaves the fake -> tool.started at the client
            to_tool, gate_part, delivery_part, saved, sent_pieces = [], [], [], [], []
            hung_up = 0
            for i in range(WARMUP + args.turns):
                script = StreamReply(command_pieces[:1] + (f" fact {i}",) + command_pieces[2:], delay_s=delay)
                llm.queue(script, StreamReply(("Noted.",)))
                index = len(llm.answers)
                _, frames = server_turn(to_server, token, session_b, f"remember that I like tea {i}")
                log = llm.answer(index)
                started = next(frame for frame in frames if frame.name == "tool.started")
                newline_at = log.sent_at[2]  # the piece holding the first line's newline
                if i < WARMUP:
                    continue
                to_tool.append((started.received - newline_at) * 1000)
                published_at = published(frames, "tool.started") - clock
                gate_part.append((published_at - newline_at) * 1000)
                delivery_part.append((started.received - published_at) * 1000)
                sent_pieces.append(log.pieces_sent)
                saved.append(len(script.pieces) - log.pieces_sent)
                hung_up += log.client_hung_up
        finally:
            stop_server(server)

    diff = percentile(ttft_server, 0.5) - percentile(ttft_direct, 0.5)
    print(
        f"streaming benchmark: {args.turns} turns each (after {WARMUP} warm-up), provider streams "
        f"{args.tokens} tokens at {args.rate:g}/s\n"
    )
    print("a. answers                                  ms")
    print(f"   time to first token, direct to fake      {p50_p95(ttft_direct)}")
    print(f"   time to first answer.delta, via server   {p50_p95(ttft_server)}")
    print(
        f"   difference at p50: {diff:+.2f} ms (target < 5 ms);  at p95: "
        f"{percentile(ttft_server, 0.95) - percentile(ttft_direct, 0.95):+.2f} ms"
    )
    print(f"   request -> fake writes 1st piece, direct {p50_p95(before_first_direct)}")
    print(f"   request -> fake writes 1st piece, server {p50_p95(before_first_server)}")
    print(
        f"     server: request -> turn.started        {p50_p95(to_started)}  "
        "(HTTP, auth, claim, hand-off, context read)"
    )
    print(
        f"             turn.started -> provider.request {p50_p95(to_request)}  "
        "(store the user message, build the request)"
    )
    print(
        f"             provider.request -> 1st piece  {p50_p95(request_to_piece)}  (provider call + the "
        f"{delay * 1000:g} ms token delay)"
    )
    print(f"   piece written -> client, direct          {p50_p95(relay_direct)}  ({len(relay_direct)} pieces)")
    print(f"   piece written -> client, via server      {p50_p95(relay_server)}  ({len(relay_server)} pieces)")
    print(f"   time to last token, direct               {p50_p95(last_direct)}")
    print(f"   time to last token, via server           {p50_p95(last_server)}")
    print(f"   the fake's 1st -> last piece, direct     {p50_p95(pacing_direct)}")
    print(f"   the fake's 1st -> last piece, server     {p50_p95(pacing_server)}")
    print(
        "\nb. body-less command (/remember), the model would go on for "
        f"{args.tokens / args.rate:g} s after the first line"
    )
    print(f"   newline leaves fake -> tool.started      {p50_p95(to_tool)} (target p50 < 5 ms)")
    print(f"     of which: -> published (: ts=)        {p50_p95(gate_part)}")
    print(f"               published -> client          {p50_p95(delivery_part)}")
    print(
        f"   pieces sent by the fake                  min {min(sent_pieces)}, max {max(sent_pieces)} of "
        f"{len(command_pieces)}; saved per turn min {min(saved)}, max {max(saved)} "
        f"({sum(saved)}/{len(command_pieces) * len(saved)} in all); fake saw the hang-up {hung_up}/{len(saved)}"
    )


if __name__ == "__main__":
    main()
