"""The sandbox's attached output stream, read one step at a time up to the launcher's marks.

Docker multiplexes a non-tty container's stdout and stderr on the attach connection in
frames (8-byte header: stream kind, 3 zero bytes, big-endian length). `FrameReader` keeps
its buffer for the whole life of the sandbox, so the bytes received after one step's marks
stay aligned for the next step. `StepReader` collects one step's output into capped buffers
on a daemon thread and strips the launcher's marks (`judge/launcher.sh` describes them):
the step is complete when stdout carried `exit` (or `unpack-failed`) and stderr carried the
final mark, both with this step's nonce. Bytes that follow a mark in the same frame come
from background processes the program left behind and are dropped; later frames are read
by the next step.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
from typing import Any

MARK = b"\x1e"
_HEADER = struct.Struct(">BxxxL")
_RECV_BYTES = 1 << 16
_MARK_ROOM = 64  # longest mark: "\x1e" + nonce + " exit 255 <20 digits>\x1e"
_EXIT = re.compile(rb"exit (\d+) (\d+)")
STDOUT, STDERR = 1, 2


class FrameReader:
    """(kind, payload) frames from Docker's multiplexed attach stream."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def next_frame(self) -> tuple[int, bytes] | None:
        """The next frame, or None once the stream has ended."""
        buffer = self._buffer
        while True:
            if len(buffer) >= _HEADER.size:
                kind, size = _HEADER.unpack_from(buffer)
                end = _HEADER.size + size
                if len(buffer) >= end:
                    payload = bytes(buffer[_HEADER.size : end])
                    del buffer[:end]
                    return kind, payload
            chunk = self._sock.recv(_RECV_BYTES)
            if not chunk:
                return None
            buffer += chunk


class StepReader:
    """One step's stdout and stderr, read on a daemon thread until the step's marks.

    After `done` is set, exactly one of these holds: `exit_code` is set (the program ended),
    `unpack_failed`, `overflow` (a stream passed `cap`: the partial output is kept), or
    `ended` (the stream closed first: the sandbox stopped; `error` says why if it broke).
    """

    def __init__(self, frames: FrameReader, nonce: str, cap: int) -> None:
        self.frames = frames
        self.cap = cap
        self.out = bytearray()
        self.err = bytearray()
        self.unpacked = False
        self.unpack_failed = False
        self.exit_code: int | None = None
        self.oom_kills = 0
        self.overflow = False
        self.ended = False
        self.error: Exception | None = None
        self.done = threading.Event()
        self._out_mark = MARK + nonce.encode() + b" "
        self._err_mark = MARK + nonce.encode() + MARK
        self._out_scan = 0
        self._err_scan = 0
        self._out_finished = False
        self._err_finished = False
        self.thread = threading.Thread(target=self._pump, name="judge-step-reader", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _pump(self) -> None:
        try:
            while not (self._out_finished and self._err_finished):
                frame = self.frames.next_frame()
                if frame is None:
                    self.ended = True
                    return
                kind, payload = frame
                if kind == STDOUT and not self._out_finished:
                    self.out += payload
                    self._take_out_marks()
                elif kind == STDERR and not self._err_finished:
                    self.err += payload
                    self._take_err_mark()
                if len(self.out) > self.cap + _MARK_ROOM or len(self.err) > self.cap + _MARK_ROOM:
                    self.overflow = True
                    return
            if len(self.out) > self.cap or len(self.err) > self.cap:
                self.overflow = True
        except (OSError, ValueError) as error:  # the socket was shut down or broke
            self.ended, self.error = True, error
        finally:
            self.done.set()

    def _take_out_marks(self) -> None:
        """Strip every complete mark of this step from stdout, acting on each."""
        out, prefix = self.out, self._out_mark
        while not self._out_finished:
            start = out.find(prefix, self._out_scan)
            if start < 0:
                self._out_scan = max(0, len(out) - len(prefix) + 1)
                return
            end = out.find(MARK, start + len(prefix))
            if end < 0:
                self._out_scan = start  # the rest of the mark is still on its way
                return
            words = bytes(out[start + len(prefix) : end])
            del out[start : end + 1]
            self._out_scan = start
            self._act_on(words)
            if self._out_finished:
                del out[start:]  # written after the end by a background process

    def _act_on(self, words: bytes) -> None:
        if words == b"files":
            self.unpacked = True
        elif words == b"unpack-failed":
            self.unpack_failed = self._out_finished = True
        elif match := _EXIT.fullmatch(words):
            self.exit_code, self.oom_kills = int(match[1]), int(match[2])
            self._out_finished = True

    def _take_err_mark(self) -> None:
        start = self.err.find(self._err_mark, self._err_scan)
        if start < 0:
            self._err_scan = max(0, len(self.err) - len(self._err_mark) + 1)
            return
        del self.err[start:]
        self._err_finished = True


def raw_socket(attached: Any) -> socket.socket:
    """The socket under what `APIClient.attach_socket` returns (a `SocketIO` on a unix socket)."""
    sock: socket.socket = getattr(attached, "_sock", attached)
    return sock
