"""Jobs for `test_bounded_worker.py`, run in `bounded.worker`'s child process."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any


def echo(args: dict[str, Any], frames: Iterator[bytes]) -> dict[str, Any]:
    return {"args": args, "frames": [frame.decode() for frame in frames]}


def count_bytes(args: dict[str, Any], frames: Iterator[bytes]) -> int:
    return sum(len(frame) for frame in frames)


def first_frame_only(args: dict[str, Any], frames: Iterator[bytes]) -> str:
    return next(frames).decode()


def allocate(args: dict[str, Any], frames: Iterator[bytes]) -> int:
    blocks = [bytearray(1024 * 1024) for _ in range(int(args["mb"]))]
    return len(blocks)


def spin(args: dict[str, Any], frames: Iterator[bytes]) -> None:
    while True:
        pass


def sleep(args: dict[str, Any], frames: Iterator[bytes]) -> None:
    time.sleep(float(args["seconds"]))


def big_answer(args: dict[str, Any], frames: Iterator[bytes]) -> str:
    return "x" * int(args["chars"])


def fail(args: dict[str, Any], frames: Iterator[bytes]) -> None:
    raise ValueError("bad input")


def environment(args: dict[str, Any], frames: Iterator[bytes]) -> dict[str, str]:
    return dict(os.environ)


def lone_surrogate(args: dict[str, Any], frames: Iterator[bytes]) -> str:
    return "a\ud800b"
