"""Reading a step's output off the attach stream: frames, the launcher's marks, the caps.

No Docker here: a socket pair stands in for the attach connection, carrying frames in the
engine's wire format (8-byte header: kind, 3 zero bytes, big-endian length).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest

from judge.step_stream import STDERR, STDOUT, FrameReader, StepReader

NONCE = "0123456789abcdef"
CAP = 1024


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", kind, len(payload)) + payload


def exit_mark(status: int, oom_kills: int = 0, nonce: str = NONCE) -> bytes:
    return f"\x1e{nonce} exit {status} {oom_kills}\x1e".encode()


END = f"\x1e{NONCE}\x1e".encode()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, engine = socket.socketpair()
    yield ours, engine
    ours.close()
    engine.close()


def read_step(ours: socket.socket, frames: FrameReader | None = None, cap: int = CAP) -> StepReader:
    reader = StepReader(frames or FrameReader(ours), NONCE, cap)
    reader.start()
    assert reader.done.wait(5)
    return reader


def test_output_and_exit_status_come_back_without_the_marks(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, engine = pair
    engine.sendall(frame(STDOUT, b"hello\n") + frame(STDERR, b"warn\n" + END) + frame(STDOUT, exit_mark(3)))
    reader = read_step(ours)
    assert (bytes(reader.out), bytes(reader.err), reader.exit_code) == (b"hello\n", b"warn\n", 3)
    assert not (reader.overflow or reader.ended or reader.unpack_failed)


def test_marks_split_across_frames_and_reads_are_found(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, engine = pair
    data = frame(STDOUT, b"\x1e" + NONCE.encode() + b" fi") + frame(STDOUT, b"les\x1eout")
    data += frame(STDOUT, exit_mark(0, 2)[:9]) + frame(STDOUT, exit_mark(0, 2)[9:]) + frame(STDERR, END)
    for byte in range(len(data)):  # one byte per send: every split of header and payload
        engine.sendall(data[byte : byte + 1])
    reader = read_step(ours)
    assert reader.unpacked and bytes(reader.out) == b"out" and (reader.exit_code, reader.oom_kills) == (0, 2)


def test_a_mark_with_another_nonce_is_plain_output(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, engine = pair
    forged = exit_mark(0, nonce="f" * 16) + f"\x1e{'f' * 16}\x1e".encode()
    engine.sendall(frame(STDOUT, forged) + frame(STDERR, forged) + frame(STDOUT, exit_mark(1)) + frame(STDERR, END))
    reader = read_step(ours)
    assert (bytes(reader.out), bytes(reader.err), reader.exit_code) == (forged, forged, 1)


def test_the_step_waits_for_both_streams(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, engine = pair
    reader = StepReader(FrameReader(ours), NONCE, CAP)
    reader.start()
    engine.sendall(frame(STDOUT, exit_mark(0)))
    assert not reader.done.wait(0.2)  # stderr may still hold the program's last words
    engine.sendall(frame(STDERR, b"last words" + END))
    assert reader.done.wait(5) and bytes(reader.err) == b"last words"


def test_bytes_after_the_marks_are_dropped_and_later_frames_wait_for_the_next_step(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, engine = pair
    frames = FrameReader(ours)
    engine.sendall(frame(STDOUT, b"a" + exit_mark(0) + b"late") + frame(STDERR, END + b"late"))
    engine.sendall(frame(STDOUT, b"next step") + frame(STDOUT, exit_mark(0)) + frame(STDERR, END))
    first = read_step(ours, frames)
    assert (bytes(first.out), bytes(first.err)) == (b"a", b"")
    second = read_step(ours, frames)
    assert bytes(second.out) == b"next step"


def test_output_past_the_cap_stops_reading_and_keeps_the_start(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, engine = pair
    engine.sendall(frame(STDOUT, b"y" * 600) + frame(STDOUT, b"y" * 600))  # no marks ever come
    reader = read_step(ours)
    assert reader.overflow and reader.exit_code is None and bytes(reader.out[:CAP]) == b"y" * CAP


def test_output_just_past_the_cap_of_a_finished_step_is_an_overflow(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, engine = pair
    engine.sendall(frame(STDERR, b"e" * (CAP + 1) + END) + frame(STDOUT, exit_mark(0)))
    assert read_step(ours).overflow
    engine.sendall(frame(STDERR, b"e" * CAP + END) + frame(STDOUT, exit_mark(0)))
    assert not read_step(ours).overflow


def test_a_failed_unpack_is_reported(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, engine = pair
    engine.sendall(frame(STDERR, b"tar: No space left on device\n" + END))
    engine.sendall(frame(STDOUT, f"\x1e{NONCE} unpack-failed\x1e".encode()))
    reader = read_step(ours)
    assert reader.unpack_failed and not reader.unpacked and b"No space" in reader.err


def test_a_stream_that_ends_first_is_reported(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, engine = pair
    engine.sendall(frame(STDOUT, b"partial"))
    engine.close()
    reader = read_step(ours)
    assert reader.ended and reader.exit_code is None and bytes(reader.out) == b"partial"


def test_shutting_the_socket_wakes_a_waiting_reader(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, _ = pair
    reader = StepReader(FrameReader(ours), NONCE, CAP)
    reader.start()
    ours.shutdown(socket.SHUT_RDWR)
    assert reader.done.wait(5) and reader.ended
