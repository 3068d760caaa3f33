"""Reading a streamed reply's chunked body straight from the socket (`provider_body.py`,
`provider_wire.ChunkedBody`).

The decoder is property-tested with chunk boundaries, extensions, bare `\\n` line ends and
trailers anywhere, fed in parts cut anywhere. Over a real socket, a server that writes a
whole stream in one go (as a fast server's burst arrives) is read in one read and handed on
as one piece; a connection whose body ended cleanly is reused, and one with bytes after its
end, or cut short, is not.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provider_base import FailureKind
from provider_wire import ChunkedBody
from providers import ChatMessage, ProviderConfig, StreamSink, build_provider

MESSAGES = [ChatMessage(role="user", content="hello")]


def encode(parts: list[bytes], *, lf_only: bool = False, extension: bool = False, trailer: bool = False) -> bytes:
    end = b"\n" if lf_only else b"\r\n"
    out = b""
    for part in parts:
        out += b"%x" % len(part) + (b";name=value" if extension else b"") + end + part + end
    out += b"0" + end + (b"X-Checksum: 1" + end if trailer else b"") + end
    return out


def feed_cut(decoder: ChunkedBody, data: bytes, cuts: list[int]) -> bytes:
    out = b""
    last = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        out += decoder.feed(data[last:cut])
        last = cut
    return out


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.binary(min_size=1, max_size=40), max_size=8),
    lf_only=st.booleans(),
    extension=st.booleans(),
    trailer=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=500), max_size=12),
    extra=st.binary(max_size=5),
)
def test_the_decoder_gives_back_the_body_however_the_bytes_are_cut(parts, lf_only, extension, trailer, cuts, extra):
    data = encode(parts, lf_only=lf_only, extension=extension, trailer=trailer)
    decoder = ChunkedBody()
    body = feed_cut(decoder, data + extra, [cut for cut in cuts if cut < len(data) + len(extra)])
    assert body == b"".join(parts)
    assert decoder.done and decoder.extra == len(extra)


def test_the_decoder_is_not_done_before_the_blank_line_after_the_last_chunk():
    decoder = ChunkedBody()
    assert decoder.feed(b"3\r\nabc\r\n0\r\n") == b"abc"
    assert not decoder.done
    assert decoder.feed(b"\r\n") == b"" and decoder.done


@pytest.mark.parametrize(
    "data",
    [b"zz\r\nabc\r\n", b"\r\nabc\r\n", b"-3\r\nabc\r\n", b"2\r\nabc\r\n", b"9" * 5000],
    ids=["not-hex", "empty-size", "negative", "data-longer-than-size", "line-too-long"],
)
def test_the_decoder_refuses_broken_framing(data):
    with pytest.raises(ValueError):
        ChunkedBody().feed(data)


# --- over a real socket ------------------------------------------------------------------------


def sse_reply(*pieces: str) -> bytes:
    events = [{"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]} for piece in pieces]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body = [b"data: " + json.dumps(event).encode() + b"\n\n" for event in events] + [b"data: [DONE]\n\n"]
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + encode(body)


class OneWriteServer:
    """Answers each request on a connection with one `sendall` of a scripted response (the
    whole stream at once), and counts the connections it accepted."""

    def __init__(self, answers: list[bytes], *, close_after: bool = False) -> None:
        self.answers = list(answers)
        self.close_after = close_after
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

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
                while b"\r\n\r\n" not in received or not self._has_body(received):
                    data = conn.recv(65536)
                    if not data:
                        return
                    received += data
                head, _, rest = received.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                received = rest[length:]
                conn.sendall(self.answers.pop(0))
                if self.close_after:
                    return

    @staticmethod
    def _has_body(received: bytes) -> bool:
        head, _, rest = received.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        return len(rest) >= length

    def close(self) -> None:
        self.answers.clear()
        self._listener.close()


@pytest.fixture
def serve() -> Iterator[type[OneWriteServer]]:
    servers: list[OneWriteServer] = []

    def start(answers: list[bytes], **kwargs: bool) -> OneWriteServer:
        server = OneWriteServer(answers, **kwargs)
        servers.append(server)
        return server

    yield start  # type: ignore[misc]
    for server in servers:
        server.close()


class Pieces(StreamSink):
    def __init__(self) -> None:
        self.pieces: list[str] = []

    def begin(self, provider: str, model: str) -> None:
        pass

    def feed(self, piece: str) -> bool:
        self.pieces.append(piece)
        return True


def provider(port: int):
    return build_provider(
        ProviderConfig(provider="openai", base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout_s=5)
    )


def test_a_burst_of_chunks_is_handed_on_as_one_piece_and_the_connection_is_reused(serve):
    server = serve([sse_reply("Sure", ", here", " you go."), sse_reply("Again", ".")])
    chat = provider(server.port)

    first, second = Pieces(), Pieces()
    assert chat.stream(MESSAGES, first).text == "Sure, here you go."
    assert chat.stream(MESSAGES, second).text == "Again."

    assert first.pieces == ["Sure, here you go."] and second.pieces == ["Again."]
    assert server.connections == 1


def test_a_body_with_bytes_after_its_end_is_read_but_its_connection_is_not_reused(serve):
    server = serve([sse_reply("one") + b"junk", sse_reply("two")])
    chat = provider(server.port)

    assert chat.call(MESSAGES).text == "one"
    assert chat.call(MESSAGES).text == "two"
    assert server.connections == 2


def test_a_body_cut_short_is_a_connection_failure(serve):
    whole = sse_reply("never", " finished")
    server = serve([whole[: len(whole) - 20]], close_after=True)

    result = provider(server.port).call(MESSAGES)

    assert result.failure is FailureKind.CONNECTION and result.text is None


def test_broken_chunk_framing_is_a_connection_failure(serve):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    server = serve([head + b"zz\r\ndata: x\r\n"], close_after=True)

    result = provider(server.port).call(MESSAGES)

    assert result.failure is FailureKind.CONNECTION and result.text is None
