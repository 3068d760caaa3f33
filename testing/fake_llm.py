"""A real HTTP server on loopback that speaks the OpenAI and Ollama chat wire formats.

Tests and benchmarks point `LLM_BASE_URL` at it, so the product's own provider code makes
real HTTP calls; the server records every request body for assertions. Replies are queued
per server; `None` answers with null content, an `int` answers with that HTTP status, a
dict or list is sent verbatim as the message content (to test malformed replies), a
`StreamReply` scripts a streamed answer exactly, and when the queue is empty `default_reply`
is used. `POST …/images/generations` answers an OpenAI-style `b64_json` PNG.

A request with `"stream": true` gets a real stream, as the servers send it: server-sent
events ending with `data: [DONE]` on `/v1/chat/completions`, newline-delimited JSON ending
with `"done": true` on Ollama's `/api/chat`, each piece written (and flushed) as its own HTTP
chunk. Server-level knobs make it misbehave on purpose: answer one JSON body anyway
(`stream_mode="json"`), pause between pieces (`token_delay_s`), trickle the whole response
one byte at a time, headers included (`trickle_s`), or send headers and never finish
(`hang_after_headers`). A hang lasts at most `hang_s` (an hour by default: benchmarks hold
answers open), then the fake drops the connection without finishing the answer: with a short
`hang_s`, a client that should have given up earlier gets a broken answer, so its test fails
instead of hanging. Every answer is logged in `answers` (an `AnswerLog`): how many pieces
went out and whether the client hung up before the end, which the fake notices at once
(it polls the connection while it waits) rather than at its next write.

A read of probabilities (`"logprobs": true`, SPEC 6.11) never takes a queued reply and is
recorded apart (`odds_requests`): by default the fake refuses it with 400, as a server that
gives no log-probabilities; `odds` (a function of the request body) makes it answer them, for
the tests of the decision by mass.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal

from testing.loopback import LoopbackServer, QuietHandler

POLL_S = 0.01  # how often a waiting answer checks whether its client hung up
HANG_S = 3600.0  # how long a hang waits for its client to give up before the fake drops the connection
SSE = "text/event-stream"
NDJSON = "application/x-ndjson"
KEEPALIVE = b": OPENROUTER PROCESSING\n\n"


Odds = list[tuple[str, float, list[tuple[str, float]]]]  # per token: its text, log-probability, alternatives


@dataclass(frozen=True)
class StreamReply:
    """A streamed answer scripted exactly (answered as one JSON body, the pieces joined,
    when the request does not ask for a stream).

    ``delay_s`` is waited before each piece; ``error_after=n`` sends a mid-stream error
    object after ``n`` pieces and ends the body; ``keepalive_comments`` sends OpenRouter's
    `: OPENROUTER PROCESSING` comment before each piece (SSE only); ``finish_reason=None``
    leaves it out of the last chunk; ``terminate=False`` ends the body without `[DONE]` /
    `"done": true`; ``hang`` keeps the stream open after the pieces until the client hangs
    up (or the server's `hang_s` passes: then the connection is dropped); ``stall_after=n``
    waits ``stall_s`` more (silent, the connection open) before piece ``n + 1``, then goes on;
    ``raw`` replaces the whole body by these bytes, one HTTP chunk each (framing tests).
    """

    pieces: tuple[str, ...] = ()
    delay_s: float = 0.0
    error_after: int | None = None
    keepalive_comments: bool = False
    finish_reason: str | None = "stop"
    terminate: bool = True
    hang: bool = False
    stall_after: int | None = None
    stall_s: float = 0.0
    usage: tuple[int, int] | None = None  # (prompt, completion) tokens; None: counted
    raw: tuple[bytes, ...] | None = None
    content_type: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)


@dataclass(frozen=True)
class ToolCallReply:
    """A native function call (`tool_calls`), answered as one JSON body (`app.py eval --native`)."""

    name: str
    arguments: dict[str, Any]


Reply = str | int | dict[str, Any] | list[Any] | StreamReply | ToolCallReply | None


@dataclass
class AnswerLog:
    """What the fake did for one chat request; filled in while the answer is sent."""

    path: str
    streamed: bool
    pieces_sent: int = 0
    sent_at: list[float] = field(default_factory=list)  # time.monotonic() of each piece
    completed: bool = False  # the whole answer went out
    client_hung_up: bool = False  # the client closed the connection before the end
    dropped: bool = False  # a hang outlasted `hang_s`: the fake closed the connection unfinished
    ended: threading.Event = field(default_factory=threading.Event)

    def wait(self, timeout: float = 5.0) -> bool:
        """Block until the handler is done with this answer; False on timeout."""
        return self.ended.wait(timeout)


def split_reply(text: str, size: int) -> tuple[str, ...]:
    """The default stream of a plain reply: a piece every ``size`` characters."""
    return tuple(text[i : i + size] for i in range(0, len(text), max(1, size)))


def tiny_png(width: int = 2, height: int = 2) -> bytes:
    """A valid PNG, for the fake image endpoint and upload tests."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


class FakeLLMServer(LoopbackServer):
    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        default_reply: str = "ok",
        delay_s: float = 0.0,
        stream_mode: Literal["auto", "json"] = "auto",
        token_delay_s: float = 0.0,
        piece_chars: int = 3,
        trickle_s: float = 0.0,
        hang_after_headers: bool = False,
        hang_s: float = HANG_S,
        port: int = 0,
    ) -> None:
        self._replies: deque[Reply] = deque(replies)
        self._rules: list[tuple[str, Reply]] = []  # (words of the last user message, its reply): `when`
        self.default_reply = default_reply
        self.delay_s = delay_s
        self.stream_mode = stream_mode
        self.token_delay_s = token_delay_s
        self.piece_chars = piece_chars
        self.trickle_s = trickle_s
        self.hang_after_headers = hang_after_headers
        self.hang_s = hang_s
        self.requests: list[dict[str, Any]] = []
        self.odds_requests: list[dict[str, Any]] = []  # reads of probabilities, apart from the chat calls
        self.odds: Callable[[dict[str, Any]], Odds] | None = None  # None: refused, as a server without them
        self.paths: list[str] = []
        self.get_paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.answers: list[AnswerLog] = []
        self.connections = 0  # TCP connections accepted (a reused connection counts once)
        self.in_flight = 0  # chat requests being answered now
        self.peak_in_flight = 0  # the most chat requests answered at once (concurrency, without a clock)
        self.released = threading.Event()  # cleared: chat answers wait until a test sets it (no race on a delay)
        self.released.set()
        self._stopping = threading.Event()
        super().__init__(port)

    @property
    def openai_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def ollama_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(
        self,
        *,
        default_reply: str = "ok",
        delay_s: float = 0.0,
        stream_mode: Literal["auto", "json"] = "auto",
        token_delay_s: float = 0.0,
        trickle_s: float = 0.0,
        hang_after_headers: bool = False,
    ) -> None:
        """Forget queued replies and recorded requests (one server shared by many tests)."""
        with self._lock:
            self._replies.clear()
            self._rules.clear()
            self.requests.clear()
            self.odds_requests.clear()
            self.paths.clear()
            self.get_paths.clear()
            self.headers.clear()
            self.answers.clear()
        self.default_reply = default_reply
        self.delay_s = delay_s
        self.stream_mode = stream_mode
        self.token_delay_s = token_delay_s
        self.trickle_s = trickle_s
        self.hang_after_headers = hang_after_headers
        self.odds = None
        self.released.set()

    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def when(self, words: str, reply: Reply) -> None:
        """Answer `reply` (every time, before the queue) to a request whose last user message
        contains `words`: several users' turns in one test, each with its own answer."""
        with self._lock:
            self._rules.append((words, reply))

    def next_reply(self, body: dict[str, Any] | None = None) -> Reply:
        with self._lock:
            asked = _last_user_text(body or {})
            for words, reply in self._rules:
                if words in asked:
                    return reply
            return self._replies.popleft() if self._replies else self.default_reply

    def answer(self, index: int = -1, timeout: float = 5.0) -> AnswerLog:
        """The log of answer ``index`` once its handler is done with it (waits for both)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                found = self.answers[index] if -len(self.answers) <= index < len(self.answers) else None
            if found is not None and found.wait(max(0.0, deadline - time.monotonic())):
                return found
            if time.monotonic() >= deadline:
                raise TimeoutError(f"answer {index} did not end within {timeout} s")
            time.sleep(POLL_S)

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()  # ends answers that wait or hang, so shutdown does not wait on them
        super().__exit__(*exc)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        return _handler_for(self)


def _usage(body: dict[str, Any], completion: int) -> tuple[int, int]:
    prompt = sum(
        len(m.get("content", "").split())
        for m in body.get("messages", [])
        if isinstance(m, dict) and isinstance(m.get("content"), str)
    )
    return prompt, completion


def _handler_for(server: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def setup(self) -> None:
            super().setup()
            with server._lock:
                server.connections += 1

        def do_GET(self) -> None:
            if server._stopping.is_set():  # stopped: a kept-alive connection is closed unanswered, as by a dead server
                self.close_connection = True
                return
            with server._lock:
                server.get_paths.append(self.path)
            if self.path.endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
            elif self.path.endswith("/api/tags"):
                self._send(200, {"models": [{"name": "fake", "model": "fake"}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            if server._stopping.is_set():
                self.close_connection = True
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if body.get("logprobs") is True:
                self._odds(body)
                return
            with server._lock:
                server.requests.append(body)
                server.paths.append(self.path)
                server.headers.append(dict(self.headers.items()))
            if self.path.endswith("/images/generations"):
                import base64

                self._send(200, {"created": 0, "data": [{"b64_json": base64.b64encode(tiny_png()).decode()}]})
                return
            streamed = body.get("stream") is True and server.stream_mode == "auto"
            log = AnswerLog(path=self.path, streamed=streamed)
            with server._lock:
                server.answers.append(log)
                server.in_flight += 1
                server.peak_in_flight = max(server.peak_in_flight, server.in_flight)
            try:
                self._answer(body, log)
            finally:
                with server._lock:
                    server.in_flight -= 1
                log.ended.set()

        # --- answers -------------------------------------------------------------------

        def _odds(self, body: dict[str, Any]) -> None:
            with server._lock:
                server.odds_requests.append(body)
            if server.odds is None:
                self._send(400, {"error": {"message": "logprobs are not supported by this server"}})
                return
            tokens = server.odds(body)
            content = [
                {"token": token, "logprob": logprob, "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top]}
                for token, logprob, top in tokens
            ]
            text = "".join(token for token, _, _ in tokens)
            whole = _openai_whole(body, text)
            whole["choices"][0]["logprobs"] = {"content": content}
            self._send(200, whole)

        def _answer(self, body: dict[str, Any], log: AnswerLog) -> None:
            while not server.released.is_set():  # held by the test until it has done what it must meanwhile
                if not self._wait(POLL_S, log):
                    return
            if server.delay_s and not self._wait(server.delay_s, log):
                return
            reply = server.next_reply(body)
            ollama = self.path.startswith("/api/chat")
            if isinstance(reply, int):
                self._emit(
                    log, reply, "application/json", json.dumps({"error": {"message": f"status {reply}"}}).encode()
                )
                return
            if isinstance(reply, ToolCallReply):
                called = _openai_whole(body, None)
                call = {
                    "id": "call-1",
                    "type": "function",
                    "function": {"name": reply.name, "arguments": json.dumps(reply.arguments)},
                }
                called["choices"][0]["message"]["tool_calls"] = [call]
                called["choices"][0]["finish_reason"] = "tool_calls"
                self._emit(log, 200, "application/json", json.dumps(called).encode())
                return
            if not log.streamed:
                content = reply.text if isinstance(reply, StreamReply) else reply
                payload = (_ollama_whole if ollama else _openai_whole)(body, content)
                self._emit(log, 200, "application/json", json.dumps(payload).encode())
                return
            script = reply if isinstance(reply, StreamReply) else self._default_stream(reply)
            if server.trickle_s:
                whole = b"".join(event for event, _ in _event_stream(body, script, ollama))
                self._emit(log, 200, script.content_type or (NDJSON if ollama else SSE), whole)
                return
            self._stream(body, script, ollama, log)

        def _default_stream(self, reply: Any) -> StreamReply:
            if isinstance(reply, str):
                return StreamReply(split_reply(reply, server.piece_chars), delay_s=server.token_delay_s)
            # None streams no content at all; a dict or list is sent as one (malformed) piece
            return StreamReply(() if reply is None else (reply,))

        def _stream(self, body: dict[str, Any], script: StreamReply, ollama: bool, log: AnswerLog) -> None:
            self.send_response(200)
            self.send_header("Content-Type", script.content_type or (NDJSON if ollama else SSE))
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            if server.hang_after_headers:
                self._hang(log)
                return
            for event, is_piece in _event_stream(body, script, ollama):
                if is_piece and script.delay_s and not self._wait(script.delay_s, log):
                    return
                stall = is_piece and log.pieces_sent == script.stall_after
                if stall and not self._wait(script.stall_s, log):
                    return
                if not self._chunk(event, log):
                    return
                if is_piece:
                    log.pieces_sent += 1
                    log.sent_at.append(time.monotonic())
            if script.hang:
                self._hang(log)
                return
            self._end(log)

        # --- the socket ----------------------------------------------------------------

        def _emit(self, log: AnswerLog, status: int, content_type: str, data: bytes) -> None:
            """One whole response: at once, trickled byte by byte, or its headers only."""
            if server.trickle_s:
                head = (
                    f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {content_type}\r\n"
                    f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
                ).encode()
                self.close_connection = True
                for byte in head + data:
                    if not self._wait(server.trickle_s, log) or not self._write(bytes([byte]), log):
                        return
                log.completed = True
                return
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if server.hang_after_headers:
                self._hang(log)
            elif self._write(data, log):
                log.completed = True

        def _write(self, data: bytes, log: AnswerLog) -> bool:
            try:
                self.wfile.write(data)
            except OSError:
                self._hung_up(log)
                return False
            return True

        def _chunk(self, data: bytes, log: AnswerLog) -> bool:
            """Write one HTTP chunk unless the client is gone."""
            if self._client_gone():
                self._hung_up(log)
                return False
            return self._write(b"%x\r\n%s\r\n" % (len(data), data), log)

        def _end(self, log: AnswerLog) -> None:
            if self._write(b"0\r\n\r\n", log):
                log.completed = True

        def _hang(self, log: AnswerLog) -> None:
            """Keep the response open until the client hangs up, the server stops or `hang_s` passes
            (then the connection is closed unfinished: the client reads a broken answer)."""
            if self._wait(server.hang_s, log):
                log.dropped = True
            self.close_connection = True

        def _wait(self, seconds: float, log: AnswerLog) -> bool:
            """Sleep, watching the client: False (and logged) when it hung up, or the server stops."""
            deadline = time.monotonic() + seconds
            while True:
                if self._client_gone():
                    self._hung_up(log)
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                if server._stopping.wait(min(POLL_S, left)):
                    self.close_connection = True
                    return False

        def _client_gone(self) -> bool:
            """The client closed its end: readable with nothing to read (no request is
            pipelined while an answer is being sent)."""
            try:
                poller = select.poll()  # not select.select: it fails for descriptors >= 1024
                poller.register(self.connection, select.POLLIN | select.POLLHUP)
                readable = poller.poll(0)
                return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True

        def _hung_up(self, log: AnswerLog) -> None:
            log.client_hung_up = True
            self.close_connection = True

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _last_user_text(body: dict[str, Any]) -> str:
    """The text of a request's last user message (its parts joined), "" without one."""
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
            return str(content or "")
    return ""


def _openai_whole(body: dict[str, Any], content: Any) -> dict[str, Any]:
    prompt, completion = _usage(body, 1 if content else 0)
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": body.get("model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def _ollama_whole(body: dict[str, Any], content: Any) -> dict[str, Any]:
    prompt, completion = _usage(body, 1 if content else 0)
    return {
        "model": body.get("model"),
        "message": {"role": "assistant", "content": content if content is not None else ""},
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": prompt,
        "eval_count": completion,
    }


def _event_stream(body: dict[str, Any], script: StreamReply, ollama: bool) -> list[tuple[bytes, bool]]:
    """The body of a streamed answer as (bytes, is_piece) writes, in the server's format."""
    if script.raw is not None:
        return [(data, True) for data in script.raw]
    model = body.get("model")
    pieces = script.pieces if script.error_after is None else script.pieces[: script.error_after]
    prompt, completion = script.usage or _usage(body, len(pieces))
    out: list[tuple[bytes, bool]] = []
    if ollama:

        def line(obj: dict[str, Any]) -> bytes:
            return json.dumps(obj).encode() + b"\n"

        for piece in pieces:
            out.append(
                (
                    line(
                        {
                            "model": model,
                            "created_at": "2026-01-01T00:00:00Z",
                            "message": {"role": "assistant", "content": piece},
                            "done": False,
                        }
                    ),
                    True,
                )
            )
        if script.hang:
            return out
        if script.error_after is not None:
            out.append((line({"error": "model runner has unexpectedly stopped"}), False))
        elif script.terminate:
            last: dict[str, Any] = {
                "model": model,
                "created_at": "2026-01-01T00:00:00Z",
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "prompt_eval_count": prompt,
                "eval_count": completion,
            }
            if script.finish_reason is not None:
                last["done_reason"] = script.finish_reason
            out.append((line(last), False))
        return out

    def sse(obj: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }

    out.append((sse(chunk({"role": "assistant", "content": ""})), False))
    for piece in pieces:
        event = sse(chunk({"content": piece}))
        out.append(((KEEPALIVE + event) if script.keepalive_comments else event, True))
    if script.hang:  # the stream stays open after the pieces (see `_stream`): no end
        return out
    if script.error_after is not None:  # OpenRouter's mid-stream error: a chunk with `error`
        error = {"code": "server_error", "message": "Provider disconnected"}
        out.append((sse(chunk({"content": ""}, "error", error=error)), False))
        return out
    if script.finish_reason is not None:
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        out.append((sse(chunk({}, script.finish_reason, usage=usage)), False))
    if script.terminate:
        out.append((b"data: [DONE]\n\n", False))
    return out
