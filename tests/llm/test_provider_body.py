"""Reading a streamed reply's chunked body straight from the socket (`llm/body.py`,
`llm.framing.ChunkedBody`).

The decoder is property-tested with chunk boundaries, extensions, bare `\\n` line ends and
trailers anywhere, fed in parts cut anywhere. Over a real socket, through both transports
(a plain `http://` server directly, `llm/direct.py`; any other through `requests`,
reached here through an HTTP proxy that the test server plays), a server that writes a whole
stream in one go (as a fast server's burst arrives) is read in one read and handed on as one
piece; a connection whose body ended cleanly is reused, and one with bytes after its end, or
cut short, is not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm.base import FailureKind
from llm.framing import ChunkedBody
from providers import ChatMessage, Provider, ProviderConfig, StreamSink, build_provider
from tests.raw_http_support import RawHTTPServer, chunked, raw_servers, sse_reply

MESSAGES = [ChatMessage(role="user", content="hello")]


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
    data = chunked(parts, lf_only=lf_only, extension=extension, trailer=trailer)
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


@pytest.fixture
def serve() -> Iterator[type[RawHTTPServer]]:
    with raw_servers() as start:
        yield start


class Pieces(StreamSink):
    def __init__(self) -> None:
        self.pieces: list[str] = []

    def begin(self, provider: str, model: str) -> None:
        pass

    def feed(self, piece: str) -> bool:
        self.pieces.append(piece)
        return True


@pytest.fixture(params=["direct", "requests"])
def provider(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Callable[[int], Provider]:
    """A provider of the server on `port`: directly, or through requests with the server as
    its HTTP proxy (it answers whatever URL it is asked for)."""
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)

    def build(port: int) -> Provider:
        base_url = f"http://127.0.0.1:{port}/v1"
        if request.param == "requests":
            monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
            base_url = "http://upstream.invalid/v1"
        return build_provider(ProviderConfig(provider="openai", base_url=base_url, model="m", timeout_s=5))

    return build


def test_a_burst_of_chunks_is_handed_on_as_one_piece_and_the_connection_is_reused(serve, provider):
    server = serve([sse_reply("Sure", ", here", " you go."), sse_reply("Again", ".")])
    chat = provider(server.port)

    first, second = Pieces(), Pieces()
    assert chat.stream(MESSAGES, first).text == "Sure, here you go."
    assert chat.stream(MESSAGES, second).text == "Again."

    assert first.pieces == ["Sure, here you go."] and second.pieces == ["Again."]
    assert server.connections == 1


def test_a_body_with_bytes_after_its_end_is_read_but_its_connection_is_not_reused(serve, provider):
    server = serve([sse_reply("one") + b"junk", sse_reply("two")])
    chat = provider(server.port)

    assert chat.call(MESSAGES).text == "one"
    assert chat.call(MESSAGES).text == "two"
    assert server.connections == 2


def test_a_body_cut_short_is_a_connection_failure(serve, provider):
    whole = sse_reply("never", " finished")
    server = serve([whole[: len(whole) - 20]], close_after=True)

    result = provider(server.port).call(MESSAGES)

    assert result.failure is FailureKind.CONNECTION and result.text is None


def test_broken_chunk_framing_is_a_connection_failure(serve, provider):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    server = serve([head + b"zz\r\ndata: x\r\n"], close_after=True)

    result = provider(server.port).call(MESSAGES)

    assert result.failure is FailureKind.CONNECTION and result.text is None
