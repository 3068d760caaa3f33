"""Reading a provider reply's body as it arrives, one read per arrival, not per HTTP chunk.

A streaming server writes each token as its own HTTP chunk, and a fast one writes dozens
before the reader wakes up: the socket then holds many chunks at once. http.client's
`read1` hands on one chunk per call, so every chunk cost a trip through urllib3 and
http.client, a pass of the SSE decoder and a hand-off to the reply's sink, which was a
third of a plain turn's CPU for a short reply.

`ChunkedSocketBody` reads the connection's buffered socket file itself, which returns
everything received so far, and decodes the chunked framing with `llm.framing.ChunkedBody`.
It is used only when that is exactly the body: a real connection (not a mocked response), a
chunked body, no content coding, nothing read yet. Anything else (a `Content-Length` body, a
gzip body, a `responses` mock) is read with urllib3's `read1` (`Urllib3Body`), as before.

Once the last chunk is read, the response is closed and its connection handed back to the
pool, as urllib3 does for a body read to its end; a body with bytes after its end, or cut
short, is not, so the connection is dropped when the response is closed.
"""

from __future__ import annotations

import http.client
from typing import Protocol

import requests
import urllib3

from llm.direct import DirectResponse
from llm.framing import ChunkedBody

READ_SIZE = 64 * 1024


class BodyReader(Protocol):
    def read(self) -> bytes:
        """What has arrived of the body (waiting for at least one byte); ``b""`` at its end.
        Raises `http.client.HTTPException` or `OSError` for a broken body."""


class Urllib3Body:
    """urllib3's `read1`: at most one HTTP chunk per call, content coding undone."""

    def __init__(self, response: requests.Response) -> None:
        self._raw: urllib3.HTTPResponse = response.raw

    def read(self) -> bytes:
        return self._raw.read1(READ_SIZE, decode_content=True) or b""


class ChunkedSocketBody:
    """A chunked body read straight from the connection's buffered socket file."""

    def __init__(self, raw: urllib3.HTTPResponse, reply: http.client.HTTPResponse) -> None:
        assert reply.fp is not None  # checked by `body_reader`
        self._raw = raw
        self._reply = reply
        self._file = reply.fp
        self._chunks = ChunkedBody()
        self._ended = False

    def read(self) -> bytes:
        while not self._chunks.done:
            data = self._file.read1(READ_SIZE)  # all that is buffered, or one receive
            if not data:
                raise http.client.IncompleteRead(b"")  # the server closed before the last chunk
            try:
                body = self._chunks.feed(data)
            except ValueError as error:
                raise http.client.IncompleteRead(b"") from error  # as http.client does for a bad size
            if body:
                return body
        self._end()
        return b""

    def _end(self) -> None:
        """Hand the connection back to the pool, once, if nothing came after the body."""
        if self._ended:
            return
        self._ended = True
        if self._chunks.extra:
            return  # the connection is closed with the response, never reused
        self._reply.close()  # closes the socket file only: the connection can send again
        self._raw.release_conn()


def body_reader(response: requests.Response | DirectResponse) -> BodyReader:
    """The fastest reader that reads exactly this body (see the module doc); a direct reply
    (`llm/direct.py`) reads itself."""
    if isinstance(response, DirectResponse):
        return response
    raw = response.raw
    reply = getattr(raw, "_fp", None)  # urllib3 keeps http.client's response there
    if (
        isinstance(raw, urllib3.HTTPResponse)
        and isinstance(reply, http.client.HTTPResponse)
        and reply.fp is not None
        and reply.chunked
        and reply.chunk_left is None  # nothing read yet
        and raw.connection is not None
        and response.headers.get("Content-Encoding", "identity").strip().lower() in ("", "identity")
    ):
        return ChunkedSocketBody(raw, reply)
    return Urllib3Body(response)
