"""Replies that misbehave at the byte level, over a real socket (`llm/transport.py`).

`RawHTTPServer` answers with scripted bytes, each answer in one write (as a fast server's
burst arrives): a whole stream read in one go, bytes after a reply's end, a reply cut short,
broken chunk framing. What the client sees is the call's outcome; whether a connection was
reused is what the server counts.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llm.base import FailureKind
from providers import ChatMessage, Provider, ProviderConfig, StreamSink, build_provider
from tests.raw_http_support import RawHTTPServer, raw_servers, sse_reply

MESSAGES = [ChatMessage(role="user", content="hello")]


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


def provider(server: RawHTTPServer) -> Provider:
    return build_provider(ProviderConfig(provider="openai", base_url=f"{server.base_url}/v1", model="m", timeout_s=5))


def test_a_stream_that_arrives_in_one_burst_is_read_whole_and_the_connection_is_reused(serve):
    server = serve([sse_reply("Sure", ", here", " you go."), sse_reply("Again", ".")])
    chat = provider(server)

    first, second = Pieces(), Pieces()
    assert chat.stream(MESSAGES, first).text == "Sure, here you go."
    assert chat.stream(MESSAGES, second).text == "Again."

    assert "".join(first.pieces) == "Sure, here you go." and "".join(second.pieces) == "Again."
    assert server.connections == 1


def test_a_body_with_bytes_after_its_end_still_stands_and_the_next_call_succeeds(serve):
    server = serve([sse_reply("one") + b"junk", sse_reply("two")])
    chat = provider(server)

    assert chat.call(MESSAGES).text == "one"
    assert chat.call(MESSAGES).text == "two"


def test_a_body_cut_short_is_a_connection_failure(serve):
    whole = sse_reply("never", " finished")
    server = serve([whole[: len(whole) - 20]], close_after=True)

    result = provider(server).call(MESSAGES)

    assert result.failure is FailureKind.CONNECTION and result.text is None


def test_broken_chunk_framing_is_a_connection_failure(serve):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    server = serve([head + b"zz\r\ndata: x\r\n"], close_after=True)

    result = provider(server).call(MESSAGES)

    assert result.failure is FailureKind.CONNECTION and result.text is None
