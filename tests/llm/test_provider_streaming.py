"""Providers stream: pieces as they arrive, the first-token deadline, cancel and early stop.

Most tests make real HTTP calls to `FakeLLMServer` on loopback, so the socket machinery
(shutting a blocked read from another thread) is exercised for real; the framing parsers
get property tests that cut the bytes everywhere; a few `responses` mocks cover the
socket-less path. No assertion bounds wall time: a deadline or a cancel is proved by how the
call ended (TIMEOUT, IDLE_TIMEOUT, CANCELLED) and by the fake's log (the client hung up before the fake's
own end: a hang is dropped after `HANG_S`, a held answer sent after 30 s, a trickle finishes).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import responses
from hypothesis import given, settings
from hypothesis import strategies as st

from foundation.cancellation import CancelToken, Watchdog
from llm.abort import CallHandle
from llm.framing import LineSplitter, NdjsonDecoder, SseDecoder
from llm.transport import READ_SIZE, SETTLE_GRACE_S
from providers import (
    ChatMessage,
    FailureKind,
    FallbackChain,
    Provider,
    ProviderConfig,
    build_provider,
)
from testing.fake_llm import FakeLLMServer, StreamReply
from testing.waiting import HUNG_S, wait_until

HANG_S = 30.0  # a hang ends (the fake drops the connection) after this: far past every deadline here

MESSAGES = [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="hello there")]
WIRES = ["openai", "ollama"]


@pytest.fixture
def fake() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(hang_s=HANG_S) as server:
        yield server


class Recorder:
    """A sink that keeps what it was given; ``stop_after`` pieces, then it says stop."""

    def __init__(self, stop_after: int | None = None, on_piece: Any = None) -> None:
        self.begins: list[tuple[str, str]] = []
        self.pieces: list[str] = []
        self.times: list[float] = []
        self.stop_after = stop_after
        self.on_piece = on_piece

    def begin(self, provider: str, model: str) -> None:
        self.begins.append((provider, model))
        self.pieces.append("|")  # attempt boundary, to see what each attempt fed

    def feed(self, piece: str) -> bool:
        self.pieces.append(piece)
        self.times.append(time.monotonic())
        if self.on_piece is not None:
            self.on_piece(piece)
        fed = len([p for p in self.pieces if p != "|"])
        return self.stop_after is None or fed < self.stop_after

    @property
    def text(self) -> str:
        return "".join(p for p in self.pieces if p != "|")


def provider_for(
    fake: FakeLLMServer,
    wire: str = "openai",
    *,
    timeout_s: float = 5.0,
    idle_timeout_s: float = 60.0,
    name: str | None = None,
    key: str | None = None,
) -> Provider:
    base = fake.ollama_base_url if wire == "ollama" else fake.openai_base_url
    config = ProviderConfig(
        provider=name or wire,
        base_url=base,
        model="m-1",
        api_key=key,
        timeout_s=timeout_s,
        idle_timeout_s=idle_timeout_s,
    )
    return build_provider(config)


# --- framing: bytes cut anywhere ---------------------------------------------------------------


def feed_in_parts(decoder: SseDecoder | NdjsonDecoder, data: bytes, cuts: list[int]) -> list[str]:
    out: list[str] = []
    last = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        out += decoder.feed(data[last:cut])
        last = cut
    return out + decoder.end()


SSE_SAMPLE = (
    "\ufeff: OPENROUTER PROCESSING\r\n\r\n"
    'data: {"a": "h\u00e9llo \U0001f600"}\r\n\r\n'
    "event: message\rdata: line one\rdata: line two\r\r"
    "id: 7\ndata:no-space\n\n"
    ": comment\n"
    "data: [DONE]\n\n"
).encode("utf-8")
SSE_EVENTS = ['{"a": "h\u00e9llo \U0001f600"}', "line one\nline two", "no-space", "[DONE]"]


def test_sse_sample_whole_and_byte_by_byte() -> None:
    assert feed_in_parts(SseDecoder(), SSE_SAMPLE, []) == SSE_EVENTS
    assert feed_in_parts(SseDecoder(), SSE_SAMPLE, list(range(len(SSE_SAMPLE)))) == SSE_EVENTS


@pytest.mark.parametrize("cut", range(1, len(SSE_SAMPLE)))
def test_sse_sample_cut_at_every_byte(cut: int) -> None:
    """The BOM, every `\\r\\n`, every `data:` and the UTF-8 of é and 😀 get cut somewhere."""
    assert feed_in_parts(SseDecoder(), SSE_SAMPLE, [cut]) == SSE_EVENTS


def test_cr_at_the_end_of_a_chunk_is_one_line_end_with_the_next_lf() -> None:
    lines = LineSplitter()
    assert lines.feed(b"a\r") == ["a"]
    assert lines.feed(b"\nb\r") == ["b"]  # the \n completes "a\r\n": no empty line between
    assert lines.feed(b"\r\n") == [""]  # "b\r" then "\r\n": one empty line
    assert lines.feed(b"\n") == [""]


def test_sse_end_of_stream() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: complete\n") == []  # no blank line yet
    assert decoder.feed(b"data: cut mid-li") == []
    assert decoder.end() == ["complete"]  # complete lines are delivered, a cut line is not


text_st = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(st.lists(text_st, min_size=1, max_size=3), min_size=1, max_size=5),
    ends=st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=1, max_size=3),
    bom=st.booleans(),
    comments=st.booleans(),
    data=st.data(),
)
def test_sse_property(events: list[list[str]], ends: list[str], bom: bool, comments: bool, data: Any) -> None:
    out = "\ufeff" if bom else ""
    for index, lines in enumerate(events):
        end = ends[index % len(ends)]
        if comments:
            out += f": keep-alive{end}"
        out += "".join(f"data: {line}{end}" for line in lines) + end
    raw = out.encode("utf-8")
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=8))
    assert feed_in_parts(SseDecoder(), raw, cuts) == ["\n".join(lines) for lines in events]


@settings(max_examples=200, deadline=None)
@given(
    objects=st.lists(st.dictionaries(text_st, text_st, max_size=3), min_size=1, max_size=6),
    end=st.sampled_from(["\n", "\r\n"]),
    bom=st.booleans(),
    data=st.data(),
)
def test_ndjson_property(objects: list[dict[str, str]], end: str, bom: bool, data: Any) -> None:
    raw = (("\ufeff" if bom else "") + "".join(json.dumps(o, ensure_ascii=False) + end for o in objects)).encode()
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=8))
    assert [json.loads(line) for line in feed_in_parts(NdjsonDecoder(), raw, cuts)] == objects


# --- both wire formats over loopback ----------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_streamed_reply(fake: FakeLLMServer, wire: str) -> None:
    pieces = ("Hello, ", "streaming ", "world!")
    fake.queue(StreamReply(pieces, delay_s=0.05))  # apart in time, as a model writes them
    sink = Recorder()
    result = provider_for(fake, wire).stream(MESSAGES, sink)

    assert result.ok and result.text == "Hello, streaming world!"
    assert sink.pieces == list(pieces)  # each handed on as it arrived
    assert result.finish_reason == "stop"
    assert result.usage == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    assert result.first_text_ms is not None and 0 < result.first_text_ms <= result.elapsed_ms
    assert result.status_code == 200 and result.response_bytes > len(result.text) and result.request_bytes > 0
    assert not result.stopped_early
    body = fake.requests[0]
    assert body["stream"] is True and "stream_options" not in body
    assert not {"tools", "functions", "tool_choice"} & set(body)
    assert fake.answer().completed and not fake.answer().client_hung_up


@pytest.mark.parametrize("wire", WIRES)
def test_each_piece_is_delivered_before_the_next_is_sent(fake: FakeLLMServer, wire: str) -> None:
    pieces = ("one ", "two ", "three ", "four")
    seen_sent: list[int] = []
    sink = Recorder(on_piece=lambda _: seen_sent.append(len(fake.answers[-1].sent_at)))
    fake.queue(StreamReply(pieces, delay_s=0.25))
    result = provider_for(fake, wire).stream(MESSAGES, sink)
    assert result.text == "".join(pieces) and sink.pieces == list(pieces)
    # when piece n arrived, piece n+1 had not been sent (the fake logs a piece after its write)
    assert all(sent <= n for n, sent in enumerate(seen_sent, start=1))
    sent_at = fake.answer().sent_at
    assert all(sink.times[i] < sent_at[i + 1] for i in range(len(pieces) - 1))


@pytest.mark.parametrize("wire", WIRES)
def test_call_without_sink_returns_the_whole_reply(fake: FakeLLMServer, wire: str) -> None:
    fake.queue("first reply", "second reply")
    provider = provider_for(fake, wire)
    assert provider.complete(MESSAGES) == "first reply"
    assert provider.call(MESSAGES).text == "second reply"
    assert fake.connections == 1  # the stream was read to its end: the connection was reused


def test_openrouter_keepalive_comments_are_ignored(fake: FakeLLMServer) -> None:
    fake.queue(StreamReply(("Kept ", "alive"), keepalive_comments=True))
    result = provider_for(fake, name="openrouter", key="k").stream(MESSAGES, sink := Recorder())
    assert result.text == sink.text == "Kept alive"


@pytest.mark.parametrize(("wire", "detail"), [("openai", "Provider disconnected"), ("ollama", "unexpectedly stopped")])
def test_mid_stream_error_is_upstream_error(fake: FakeLLMServer, wire: str, detail: str) -> None:
    fake.queue(StreamReply(("a", "b", "c", "d"), error_after=2))
    sink = Recorder()
    result = provider_for(fake, wire).stream(MESSAGES, sink)
    assert result.failure is FailureKind.UPSTREAM_ERROR and detail in result.detail
    assert result.text is None and sink.text == "ab"  # fed (in one piece or two), yet the call failed
    assert result.status_code == 200


@pytest.mark.parametrize("wire", WIRES)
def test_server_that_ignores_stream_answers_one_json_body(wire: str) -> None:
    with FakeLLMServer(stream_mode="json") as fake:
        fake.queue("All at once.")
        sink = Recorder()
        result = provider_for(fake, wire).stream(MESSAGES, sink)
    assert result.text == "All at once." and sink.pieces == ["All at once."]
    assert result.finish_reason == "stop" and result.usage is not None
    assert not fake.answers[0].streamed


@pytest.mark.parametrize("wire", WIRES)
def test_end_of_body_without_terminator_is_a_connection_failure(fake: FakeLLMServer, wire: str) -> None:
    fake.queue(StreamReply(("cut ", "short"), finish_reason=None, terminate=False))
    result = provider_for(fake, wire).stream(MESSAGES, Recorder())
    assert (result.text, result.failure, result.detail) == (None, FailureKind.CONNECTION, "stream ended early")


def test_done_without_a_finish_reason_is_a_stream_cut_short(fake: FakeLLMServer) -> None:
    """llama.cpp's server ends an interrupted stream with a bare `[DONE]`: not an answer."""
    fake.queue(StreamReply(("half ", "an answer"), finish_reason=None, terminate=True))
    result = provider_for(fake).stream(MESSAGES, Recorder())
    assert result.text is None and result.failure is FailureKind.CONNECTION and "finish reason" in result.detail


def test_finish_reason_without_done_is_enough(fake: FakeLLMServer) -> None:
    fake.queue(StreamReply(("fine",), finish_reason="length", terminate=False))
    result = provider_for(fake).call(MESSAGES)
    assert (result.text, result.finish_reason) == ("fine", "length")


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (None, FailureKind.EMPTY),
        ("   ", FailureKind.EMPTY),
        ({"x": 1}, FailureKind.MALFORMED),
        (503, FailureKind.SERVER_ERROR),
        (401, FailureKind.AUTH),
    ],
)
def test_stream_failures_keep_their_classes(fake: FakeLLMServer, wire: str, reply: Any, kind: FailureKind) -> None:
    fake.queue(reply)
    result = provider_for(fake, wire).call(MESSAGES)
    assert (result.text, result.failure) == (None, kind)


def test_bom_crlf_and_split_utf8_over_the_network(fake: FakeLLMServer) -> None:
    event = 'data: {"choices": [{"index": 0, "delta": {"content": "h\u00e9 \U0001f600"}}]}\r\n\r\n'.encode()
    done = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\r\n\r\ndata: [DONE]\r\n\r\n'
    smile = event.index("\U0001f600".encode())
    raw = (b"\xef\xbb", b"\xbf" + event[: smile + 2], event[smile + 2 : -1], event[-1:] + done)
    fake.queue(StreamReply(raw=raw, delay_s=0.05))
    result = provider_for(fake).stream(MESSAGES, sink := Recorder())
    assert result.text == "h\u00e9 \U0001f600" and sink.pieces == [result.text]


# --- the first-token deadline and the idle timer (more in test_provider_timers.py) -------------------


@pytest.mark.parametrize("wire", WIRES)
def test_idle_timer_cuts_a_stream_that_stops_in_the_middle(fake: FakeLLMServer, wire: str) -> None:
    fake.queue(StreamReply(("one ", "two"), hang=True))
    sink = Recorder()
    started = time.monotonic()
    result = provider_for(fake, wire, timeout_s=30.0, idle_timeout_s=0.5).stream(MESSAGES, sink)
    assert result.failure is FailureKind.IDLE_TIMEOUT and result.text is None
    assert "nothing received for 0.5 s" in result.detail and result.elapsed_ms < 20_000  # not the 30 s deadline
    assert time.monotonic() - started >= 0.5
    assert sink.text == "one two"
    assert fake.answer().client_hung_up and not fake.answer().dropped  # the client gave up, not the fake


def complete_reply_events(wire: str, *pieces: str) -> tuple[bytes, ...]:
    """A whole streamed reply, terminator included, one HTTP chunk per event."""
    if wire == "ollama":
        lines = [{"message": {"role": "assistant", "content": piece}, "done": False} for piece in pieces]
        lines.append({"message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop"})
        return tuple(json.dumps(line).encode() + b"\n" for line in lines)
    chunks = [{"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]} for piece in pieces]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return (*(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks), b"data: [DONE]\n\n")


@pytest.mark.parametrize("wire", WIRES)
def test_a_stream_held_open_after_its_terminator_succeeds_after_a_short_grace(fake: FakeLLMServer, wire: str) -> None:
    """The reply is complete at `[DONE]` / `"done": true`; a server that then sends nothing
    and never ends the body is cut off after `SETTLE_GRACE_S`, not at the call's deadline,
    and the call is a success."""
    fake.queue(StreamReply(raw=complete_reply_events(wire, "all ", "here"), hang=True))
    started = time.monotonic()
    result = provider_for(fake, wire, timeout_s=30.0).stream(MESSAGES, sink := Recorder())
    took = time.monotonic() - started
    assert result.failure is None and result.text == "all here" == sink.text
    assert SETTLE_GRACE_S <= took < 10  # the grace, far from the 30 s deadline
    assert fake.answer().client_hung_up and not fake.answer().dropped


def test_a_connection_cut_off_after_its_terminator_is_not_reused(fake: FakeLLMServer) -> None:
    """The next call opens a fresh connection and succeeds."""
    provider = provider_for(fake, timeout_s=30.0)
    fake.queue(StreamReply(raw=complete_reply_events("openai", "first"), hang=True), StreamReply(("second",)))
    assert provider.call(MESSAGES).text == "first"
    assert provider.call(MESSAGES).text == "second"
    assert fake.connections == 2


def test_deadline_cuts_a_server_that_trickles_a_byte_at_a_time(fake: FakeLLMServer) -> None:
    """Every read gets a byte well within any per-read timeout, but no piece of an answer
    ever comes; only the first-token deadline stops it."""
    fake.queue(StreamReply(raw=tuple(bytes([b]) for b in b'data: {"choices": []}\n\n' * 20), delay_s=0.1))
    result = provider_for(fake, timeout_s=1.0).call(MESSAGES)
    assert result.failure is FailureKind.TIMEOUT
    assert fake.answer().client_hung_up and 3 < fake.answer().pieces_sent < 20  # well before the 48 s trickle ends


@pytest.mark.parametrize("wire", WIRES)
def test_deadline_cuts_trickled_headers(wire: str) -> None:
    with FakeLLMServer(trickle_s=0.2) as fake:
        result = provider_for(fake, wire, timeout_s=1.0).call(MESSAGES)
        assert result.failure is FailureKind.TIMEOUT and result.status_code is None
        assert fake.answer().client_hung_up and not fake.answer().completed  # the headers alone take 20 s


def test_deadline_cuts_a_server_that_never_sends_headers() -> None:
    with FakeLLMServer(delay_s=30) as fake:
        result = provider_for(fake, timeout_s=0.5).call(MESSAGES)
        assert result.failure is FailureKind.TIMEOUT  # not the reply the fake sends after 30 s
        assert fake.answer().client_hung_up


def test_deadline_cuts_headers_then_silence() -> None:
    with FakeLLMServer(hang_after_headers=True, hang_s=HANG_S) as fake:
        result = provider_for(fake, "ollama", timeout_s=0.5).call(MESSAGES)
        assert result.failure is FailureKind.TIMEOUT and result.status_code == 200
        assert fake.answer().client_hung_up and not fake.answer().dropped


# --- cancel, from another thread ----------------------------------------------------------------------


def cancel_later(token: CancelToken, after_s: float) -> None:
    threading.Timer(after_s, token.cancel).start()


@pytest.mark.parametrize("wire", WIRES)
def test_cancel_while_waiting_for_headers(wire: str) -> None:
    with FakeLLMServer(delay_s=30) as fake:
        token = CancelToken()
        cancel_later(token, 0.3)
        result = provider_for(fake, wire, timeout_s=30).call(MESSAGES, cancel=token)
        assert result.failure is FailureKind.CANCELLED and result.text is None  # before the 30 s reply or deadline
        assert fake.answer().client_hung_up


@pytest.mark.parametrize("wire", WIRES)
def test_cancel_in_the_middle_of_a_stream(fake: FakeLLMServer, wire: str) -> None:
    fake.queue(StreamReply(tuple(f"p{i} " for i in range(200)), delay_s=0.1))  # 20 s of stream
    token = CancelToken()
    sink = Recorder()
    cancel_later(token, 0.35)
    result = provider_for(fake, wire, timeout_s=30).stream(MESSAGES, sink, cancel=token)
    assert result.failure is FailureKind.CANCELLED and result.text is None
    fed = len(sink.pieces) - 1  # the attempt boundary aside
    answer = fake.answer()
    assert 1 <= fed < 200 and answer.client_hung_up and not answer.completed


def test_cancel_from_the_sink_stops_at_once(fake: FakeLLMServer) -> None:
    token = CancelToken()
    fake.queue(StreamReply(("a", "b", "c", "d"), delay_s=0.05))
    sink = Recorder(on_piece=lambda piece: piece == "b" and token.cancel())
    result = provider_for(fake).stream(MESSAGES, sink, cancel=token)
    assert result.failure is FailureKind.CANCELLED and sink.pieces == ["a", "b"]


def test_cancelled_before_the_call_sends_nothing(fake: FakeLLMServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="providers")
    token = CancelToken()
    token.cancel()
    result = provider_for(fake).call(MESSAGES, cancel=token)
    assert result.failure is FailureKind.CANCELLED and fake.requests == []
    assert [(r.levelno, "cancelled" in r.getMessage()) for r in caplog.records] == [(logging.INFO, True)]


def test_a_cancelled_connection_is_not_reused(fake: FakeLLMServer) -> None:
    provider = provider_for(fake, timeout_s=30)
    assert provider.complete(MESSAGES) == "ok"
    fake.queue(StreamReply(("x",), hang=True))
    token = CancelToken()
    cancel_later(token, 0.2)
    assert provider.call(MESSAGES, cancel=token).failure is FailureKind.CANCELLED
    assert provider.complete(MESSAGES) == "ok"
    assert fake.connections == 2  # the first one served two calls; the cancelled one was dropped


def test_an_abort_before_the_socket_exists_applies_on_attach() -> None:
    import socket

    handle = CallHandle()
    handle.abort(FailureKind.CANCELLED)
    left, right = socket.socketpair()
    with left, right:
        handle.attach(left)
        assert left.recv(1) == b""  # shut: reads see the end at once
        assert handle.reason is FailureKind.CANCELLED


# --- early stop ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_sink_stop_closes_the_stream_and_the_server_stops_sending(fake: FakeLLMServer, wire: str) -> None:
    fake.queue(StreamReply(tuple(f"w{i} " for i in range(30)), delay_s=0.05))
    sink = Recorder(stop_after=2)
    provider = provider_for(fake, wire)
    result = provider.stream(MESSAGES, sink)
    assert result.ok and result.stopped_early and result.failure is None
    assert result.text == "w0 w1 " == sink.text
    answer = fake.answer(timeout=1.0)
    assert answer.client_hung_up and not answer.completed and answer.pieces_sent <= 4
    assert provider.complete(MESSAGES) == "ok"  # a new connection serves the next call
    assert fake.connections == 2


# --- through an HTTP proxy -------------------------------------------------------------------------


def test_streams_and_cancels_through_an_http_proxy(fake: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake plays the proxy: it gets the absolute URL and answers as the upstream would."""
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", fake.base_url)
    provider = build_provider(
        ProviderConfig(provider="openai", base_url="http://upstream.invalid/v1", model="m-1", timeout_s=30)
    )
    fake.queue("via the proxy", StreamReply(tuple(f"p{i} " for i in range(200)), delay_s=0.1))  # 20 s of stream
    assert provider.complete(MESSAGES) == "via the proxy"
    assert fake.paths[0] == "http://upstream.invalid/v1/chat/completions"
    token = CancelToken()
    cancel_later(token, 0.3)
    assert provider.call(MESSAGES, cancel=token).failure is FailureKind.CANCELLED
    answer = fake.answer()
    assert answer.client_hung_up and not answer.completed  # cut before the 20 s stream ended


# --- fallback chain ---------------------------------------------------------------------------------


def test_chain_begins_each_attempt_and_drops_nothing_silently(fake: FakeLLMServer) -> None:
    with FakeLLMServer() as second:
        fake.queue(StreamReply(("partial ", "answer"), error_after=1))
        second.queue("from ollama")
        chain = FallbackChain([provider_for(fake, "openai"), provider_for(second, "ollama")])
        sink = Recorder()
        result = chain.stream(MESSAGES, sink)
    assert sink.begins == [("openai", "m-1"), ("ollama", "m-1")]
    first_attempt, second_attempt = "".join(sink.pieces).split("|")[1:]
    assert (first_attempt, second_attempt) == ("partial ", "from ollama")
    assert (result.text, result.provider) == ("from ollama", "ollama")


def test_chain_stops_at_a_cancel() -> None:
    with FakeLLMServer(delay_s=30) as first, FakeLLMServer() as second:
        chain = FallbackChain([provider_for(first, timeout_s=30), provider_for(second)])
        token = CancelToken()
        cancel_later(token, 0.2)
        sink = Recorder()
        result = chain.stream(MESSAGES, sink, cancel=token)
        assert result.failure is FailureKind.CANCELLED
        assert len(sink.begins) == 1 and second.requests == []


def test_chain_call_still_works(fake: FakeLLMServer) -> None:
    fake.queue(503)
    chain = FallbackChain([provider_for(fake), provider_for(fake, "ollama")])
    assert chain.complete(MESSAGES) == "ok" and fake.paths == ["/v1/chat/completions", "/api/chat"]


# --- the 4 MiB cap ---------------------------------------------------------------------------------


def test_a_stream_beyond_4_mib_is_cut(fake: FakeLLMServer) -> None:
    fake.queue(StreamReply(("x" * 65536,) * 80, delay_s=0.01))
    result = provider_for(fake).call(MESSAGES)
    assert result.failure is FailureKind.MALFORMED and "too large" in result.detail
    assert 4 * 1024 * 1024 < result.response_bytes < 5 * 1024 * 1024
    assert fake.answer(timeout=2.0).client_hung_up


@responses.activate
def test_a_json_body_beyond_4_mib_is_cut() -> None:
    responses.post(URL, json={"choices": [{"message": {"content": "x" * (4 * 1024 * 1024 + 10)}}]})
    provider = build_provider(ProviderConfig(provider="openai", base_url=BASE_URL))
    result = provider.call(MESSAGES)
    assert result.failure is FailureKind.MALFORMED and "too large" in result.detail


# --- through requests without a socket (responses mocks): checked between pieces -----------------------

BASE_URL = "https://llm.example/v1"
URL = f"{BASE_URL}/chat/completions"


def sse_body(*pieces: str) -> str:
    chunks = [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    chunks.append(
        {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": len(pieces), "total_tokens": 3 + len(pieces)},
        }
    )
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def sse_body_read_apart(*pieces: str) -> str:
    """`sse_body`, each piece in a read of its own: SSE comment lines (ignored) fill the
    transport's read size between them, the way time does between a real model's tokens."""
    filler = ": keep-alive\n" * (READ_SIZE // 13 + 1)
    events = sse_body(*pieces).split("\n\n")
    return "".join(event + "\n\n" + (filler if index < len(pieces) else "") for index, event in enumerate(events[:-1]))


def mocked(timeout_s: float = 5.0) -> Provider:
    return build_provider(ProviderConfig(provider="openai", base_url=BASE_URL, timeout_s=timeout_s))


@responses.activate
def test_mocked_sse_stream() -> None:
    responses.post(URL, body=sse_body_read_apart("a", "b", "c"), content_type="text/event-stream")
    result = mocked().stream(MESSAGES, sink := Recorder())
    assert (result.text, sink.pieces, result.usage["total_tokens"]) == ("abc", ["a", "b", "c"], 6)  # type: ignore[index]


@responses.activate
def test_pieces_that_arrive_in_one_read_are_handed_on_as_one() -> None:
    """A burst (here the whole body in one read) is one piece: one `answer.delta`, not one per chunk."""
    responses.post(URL, body=sse_body("a", "b", "c"), content_type="text/event-stream")
    result = mocked().stream(MESSAGES, sink := Recorder())
    assert (result.text, sink.pieces, result.finish_reason) == ("abc", ["abc"], "stop")


@responses.activate
def test_mocked_cancel_between_pieces() -> None:
    responses.post(URL, body=sse_body_read_apart("a", "b", "c"), content_type="text/event-stream")
    token = CancelToken()
    sink = Recorder(on_piece=lambda piece: token.cancel())
    result = mocked().stream(MESSAGES, sink, cancel=token)
    assert result.failure is FailureKind.CANCELLED and sink.pieces == ["a"]


@responses.activate
def test_mocked_slow_sink_is_not_a_silent_server() -> None:
    """Once the answer started, time the caller spends with a piece is neither the first-token
    deadline nor the server's silence: the answer is read whole."""
    responses.post(URL, body=sse_body_read_apart("a", "b", "c"), content_type="text/event-stream")
    sink = Recorder(on_piece=lambda piece: time.sleep(0.3))
    provider = build_provider(ProviderConfig(provider="openai", base_url=BASE_URL, timeout_s=0.2, idle_timeout_s=0.2))
    result = provider.stream(MESSAGES, sink)
    assert result.failure is None and sink.pieces == ["a", "b", "c"]


@responses.activate
def test_mocked_error_event_is_upstream_error() -> None:
    error = {
        "error": {"code": 502, "message": "upstream died"},
        "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
    }
    responses.post(URL, body=f"data: {json.dumps(error)}\n\n", content_type="text/event-stream")
    result = mocked().call(MESSAGES)
    assert result.failure is FailureKind.UPSTREAM_ERROR and "upstream died" in result.detail


@responses.activate
def test_error_bodies_are_read_up_to_64_kib() -> None:
    responses.post(URL, status=500, body="x" * (1024 * 1024))
    result = mocked().call(MESSAGES)
    assert result.failure is FailureKind.SERVER_ERROR and result.response_bytes == 64 * 1024


@responses.activate
def test_a_retry_after_beyond_the_deadline_is_not_waited_for() -> None:
    responses.post(URL, status=429, headers={"Retry-After": "3"})
    slept: list[float] = []
    result = build_provider(
        ProviderConfig(provider="openai", base_url=BASE_URL, timeout_s=2.0), sleep=slept.append
    ).call(MESSAGES)
    assert result.failure is FailureKind.RATE_LIMITED and len(responses.calls) == 1
    assert slept == []  # it did not wait 3 s of a 2 s deadline


@responses.activate
def test_cancel_ends_a_retry_after_wait() -> None:
    responses.post(URL, status=429, headers={"Retry-After": "5"})
    token = CancelToken()
    cancel_later(token, 0.2)
    result = mocked(timeout_s=30).call(MESSAGES, cancel=token)
    assert result.failure is FailureKind.CANCELLED and len(responses.calls) == 1  # no retry after the 5 s


# --- the watchdog's thread does not outlive its work ------------------------------------------------


def test_watchdog_thread_ends_when_idle() -> None:
    watchdog = Watchdog("test-watchdog", idle_s=0.05)
    fired = threading.Event()
    watchdog.schedule(0.01, fired.set)
    assert fired.wait(HUNG_S)
    unschedule = watchdog.schedule(60, fired.clear)
    unschedule()
    wait_until(
        lambda: not any(t.name == "test-watchdog" for t in threading.enumerate()),
        "the idle watchdog thread never ended",
    )
    assert fired.is_set()  # the unscheduled callback never ran
    again = threading.Event()
    watchdog.schedule(0.01, again.set)  # a new thread starts for new work
    assert again.wait(HUNG_S)
