"""Incremental framing of streamed replies: server-sent events and newline-delimited JSON.

A provider stream arrives in byte chunks cut wherever the network likes: inside a UTF-8
sequence (a BOM included), between the two bytes of `\\r\\n`, inside `data:`. These decoders
take bytes as they come and hand back only complete units (the data of one SSE event, one
NDJSON line), so the wire-format code in `llm/http.py` never sees half a line. They
know nothing about chat completions.

Line ends are found on bytes, before decoding: `\\r` and `\\n` never occur inside a UTF-8
multi-byte sequence, so a complete line always decodes whole. An unterminated last line is
dropped at the end of the stream: a line cut by a broken connection is not a message.
"""

from __future__ import annotations

import re
from typing import Protocol

LINE_END = re.compile(rb"\r\n|\r|\n")
BOM = "\ufeff"


class Framing(Protocol):
    """Bytes in, complete payloads (SSE event data or NDJSON lines) out."""

    def feed(self, data: bytes) -> list[str]:
        """Payloads completed by ``data``."""

    def end(self) -> list[str]:
        """Payloads still pending when the stream ends."""


class LineSplitter:
    """Bytes in, complete text lines out (without their ends).

    Lines end with `\\n`, `\\r\\n` or `\\r`, as SSE allows. A `\\r` that ends a chunk is a
    line end at once (the line is not held back waiting for the next chunk); a `\\n` that
    starts the next chunk is then the second half of that `\\r\\n` and is skipped. A BOM at
    the very start of the stream is removed.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._skip_lf = False
        self._first = True

    def feed(self, data: bytes) -> list[str]:
        if not data:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        scan_from = len(self._buffer)  # the kept tail never holds a line end
        self._buffer += data
        if b"\r" not in data:  # the usual case: only `\n` ends lines; split at C speed
            if b"\n" not in data:
                return []
            *complete, self._buffer = self._buffer.split(b"\n")  # each byte is scanned at most twice
            return [self._decode(line) for line in complete]
        lines: list[str] = []
        start = 0
        for match in LINE_END.finditer(self._buffer, scan_from):
            lines.append(self._decode(self._buffer[start : match.start()]))
            start = match.end()
            if match.group() == b"\r" and start == len(self._buffer):
                self._skip_lf = True
        del self._buffer[:start]
        return lines

    def _decode(self, raw: bytes | bytearray) -> str:
        text = raw.decode("utf-8", errors="replace")
        if self._first:
            self._first = False
            if text.startswith(BOM):
                text = text[1:]
        return text


class SseDecoder:
    """Server-sent events (the WHATWG event-stream format) -> the data of each event.

    Comment lines (`: OPENROUTER PROCESSING` keep-alives) are skipped; `data:` lines of one
    event are joined with `\\n`; `event:`, `id:` and `retry:` are read and ignored: chat
    completion streams carry everything in `data`. At the end of the stream an event whose
    lines are complete but which lacks its closing blank line is still delivered.
    """

    def __init__(self) -> None:
        self._lines = LineSplitter()
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[str]:
        return self._take(self._lines.feed(data))

    def end(self) -> list[str]:
        if not self._data:
            return []
        event, self._data = "\n".join(self._data), []
        return [event]

    def _take(self, lines: list[str]) -> list[str]:
        events: list[str] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(":"):
                continue
            field, sep, value = line.partition(":")
            if sep and value.startswith(" "):
                value = value[1:]
            if field == "data":
                self._data.append(value)
        return events


class NdjsonDecoder:
    """Newline-delimited JSON (Ollama's stream) -> each non-blank line, stripped."""

    def __init__(self) -> None:
        self._lines = LineSplitter()

    def feed(self, data: bytes) -> list[str]:
        return [line.strip() for line in self._lines.feed(data) if line.strip()]

    def end(self) -> list[str]:
        return []


class ChunkedBody:
    """`Transfer-Encoding: chunked` bytes in, body bytes out, as they arrive.

    The transport reads a streamed reply's socket itself (`llm/body.py`): one read
    takes everything that has arrived, however many HTTP chunks that is, where a reader that
    decodes chunk by chunk hands on one chunk per call. Lines may end with `\\r\\n` or `\\n`;
    chunk extensions and trailer fields are read and ignored. `done` turns true once the last
    chunk and the trailer have been read; `extra` counts any bytes that came after them.
    A size line that is not a hexadecimal number, or longer than `MAX_LINE`, raises
    `ValueError`.
    """

    MAX_LINE = 4096

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._left = 0  # bytes of the current chunk's data still to come
        self._state = "size"  # size -> data -> data_end -> size ... -> trailer -> done

    @property
    def done(self) -> bool:
        return self._state == "done"

    @property
    def extra(self) -> int:
        return len(self._buffer) if self.done else 0

    def feed(self, data: bytes) -> bytes:
        """The body bytes completed by ``data``."""
        buffer = self._buffer
        buffer += data
        out: list[bytes] = []
        start = 0
        while self._state != "done":
            if self._state == "data":
                take = min(self._left, len(buffer) - start)
                if not take:
                    break
                out.append(bytes(buffer[start : start + take]))
                start += take
                self._left -= take
                if not self._left:
                    self._state = "data_end"
                continue
            end = buffer.find(b"\n", start)
            if end < 0:
                if len(buffer) - start > self.MAX_LINE:
                    raise ValueError("chunk line too long")
                break
            line = bytes(buffer[start:end]).rstrip(b"\r")
            start = end + 1
            if self._state == "data_end":
                if line:
                    raise ValueError("chunk data longer than its size")
                self._state = "size"
            elif self._state == "size":
                size = int(line.split(b";", 1)[0].strip() or b"x", 16)  # int() raises on "x"
                if size < 0:
                    raise ValueError("negative chunk size")
                self._left, self._state = size, ("data" if size else "trailer")
            elif not line:  # the blank line that ends the trailer
                self._state = "done"
        del buffer[:start]
        return b"".join(out)
