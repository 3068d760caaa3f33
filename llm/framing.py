"""Incremental framing of streamed replies: server-sent events and newline-delimited JSON.

A provider stream arrives in byte chunks cut wherever the network likes: inside a UTF-8
sequence (a BOM included), between the two bytes of `\\r\\n`, inside `data:`. These decoders
take bytes as they come and hand back only complete units (the data of one SSE event, one
NDJSON line), so the wire-format code (`llm/openai_wire.py`, `llm/ollama_wire.py`) never sees half a line. They
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
