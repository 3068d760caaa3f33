"""What goes over the pipes between the server and a worker (both sides import this; stdlib only).

A frame is a 4-byte big-endian length and that many bytes. Server to worker, per job: one
JSON header frame (`function`, `args`, `cpu_s`, `output_bytes`, `seconds_left`), any number
of raw input frames, then `END` (the length 0xFFFFFFFF and no body): a worker is reused, so
end of file cannot mark the end of one job's input. Worker to server: optionally `{"phase": "started"}`
(the job's untrusted part begins, see `jobs.Limits.setup_s`), then one answer,
`{"ok": true, "value": ...}` or `{"ok": false, "kind": ..., "detail": ...}`, with
`"retire": true` when the worker exits after it.

Messages are JSON, never pickle: a worker that went wrong can send a wrong value, never code.
Text is UTF-8 with lone surrogates passed through (`surrogatepass`), so any Python string
survives the trip.
"""

from __future__ import annotations

import json
import struct
from typing import IO, Any

HEADER = struct.Struct(">I")
END = 0xFFFFFFFF  # the length that marks the end of a job's input
END_FRAME = HEADER.pack(END)
MAX_HEADER_BYTES = 16 * 1024 * 1024  # a job's header (a task's setup script can be a few MB)
SKIP_CHUNK = 64 * 1024


class ProtocolError(ValueError):
    """A frame the reader cannot accept (too large, not a JSON object)."""


def encode(message: dict[str, Any]) -> bytes:
    """A JSON message as its frame body."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def decode(body: bytes) -> dict[str, Any]:
    value = json.loads(body.decode("utf-8", "surrogatepass"))
    if not isinstance(value, dict):
        raise ProtocolError("a message must be a JSON object")
    return value


def frame(body: bytes) -> bytes:
    return HEADER.pack(len(body)) + body


def read_frame(stream: IO[bytes], limit: int | None = None) -> bytes | None:
    """The next frame's body from a blocking stream; None at `END` or end of file."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    if size == END:
        return None
    if limit is not None and size > limit:
        raise ProtocolError(f"a frame of {size} bytes is over the {limit}-byte limit")
    body = stream.read(size)
    return body if len(body) == size else None


def skip_frames(stream: IO[bytes]) -> None:
    """Read and drop frames up to `END` (or end of file) without holding any of them whole."""
    while True:
        head = stream.read(HEADER.size)
        if len(head) < HEADER.size:
            return
        (size,) = HEADER.unpack(head)
        if size == END:
            return
        while size > 0:
            chunk = stream.read(min(size, SKIP_CHUNK))
            if not chunk:
                return
            size -= len(chunk)


def write_message(stream: IO[bytes], message: dict[str, Any]) -> None:
    stream.write(frame(encode(message)))
    stream.flush()
