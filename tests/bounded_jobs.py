"""Jobs for `test_bounded_worker.py`, run in a `bounded.child` worker of the test kinds."""

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


def pid(args: dict[str, Any], frames: Iterator[bytes]) -> int:
    return os.getpid()


_KEPT: list[bytearray] = []  # what `keep` holds on to, so the worker's resident size grows between jobs


def keep(args: dict[str, Any], frames: Iterator[bytes]) -> int:
    _KEPT.append(bytearray(b"\x01") * (int(args["mb"]) * 1024 * 1024))
    return os.getpid()


def hold(args: dict[str, Any], frames: Iterator[bytes]) -> int:
    """Touch `mb` of memory (resident, not just mapped) and keep it for `seconds`."""
    block = bytearray(b"\x01") * (int(args["mb"]) * 1024 * 1024)
    time.sleep(float(args["seconds"]))
    return len(block) // (1024 * 1024)


def set_up_then_sleep(args: dict[str, Any], frames: Any) -> str:
    """A job with a trusted set-up phase: `setup_s` before it says it started, then `seconds`."""
    time.sleep(float(args["setup_s"]))
    frames.started()
    time.sleep(float(args["seconds"]))
    return "done"


def mark_then_wait(args: dict[str, Any], frames: Iterator[bytes]) -> str:
    """Append `tag` to the file `log` (the order jobs started in), then wait until the file
    `log.tag.go` exists (the test lets each job end when it chooses)."""
    with open(args["log"], "a") as log:
        log.write(args["tag"] + "\n")
    go = f"{args['log']}.{args['tag']}.go"
    for _ in range(3000):
        if os.path.exists(go):
            return str(args["tag"])
        time.sleep(0.01)
    return "never released"
