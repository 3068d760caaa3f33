"""Run one job on untrusted input in a fresh child process with hard limits.

Why a process, and a fresh one: the limits must hold inside the engine (a regex compile, a
parser building its tree), where no Python-level check runs. A child has its own address
space, capped with `RLIMIT_AS`, and can be killed at any instant; a thread can be neither.
Forking the server would copy a multi-threaded process (locks held by other threads,
open database connections), so the child is a new interpreter (`python -I`) that imports
only the job's module, with an empty environment (no API keys reach it).

`run(job, limits, cancel)` returns `Done(value)` or `JobFailed(kind, detail)`, never
raises for what the job or its input did:
  * `timeout`: killed at `limits.wall_s` (or stopped by `RLIMIT_CPU`, a backstop);
  * `memory`: the job passed its address-space budget (`MemoryError` in the child, or the
    child could not even answer);
  * `too_large`: the answer was larger than `limits.output_bytes`;
  * `cancelled`: the turn's cancel token fired (the child is killed at once);
  * `crashed`: anything else (an exception in the job, a signal).

The input is streamed: `Job.frames` is consumed lazily on a writer thread while the
caller's thread reads the answer, so neither side can block the other, and the caller
never holds all of a large input at once.
"""

from __future__ import annotations

import json
import math
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from cancellation import NEVER, CancelToken

ROOT = Path(__file__).resolve().parent.parent
BOOT = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bounded.child import main; main()"
CHILD_ENV = {"LC_ALL": "C.UTF-8"}
MB = 1024 * 1024
EXIT_NO_MEMORY = 3  # bounded.child.EXIT_NO_MEMORY


class Failure(StrEnum):
    TIMEOUT = "timeout"
    MEMORY = "memory"
    TOO_LARGE = "too_large"
    CANCELLED = "cancelled"
    CRASHED = "crashed"


@dataclass(frozen=True)
class Limits:
    wall_s: float  # the child is killed this long after it starts
    memory_mb: int  # address space the job may add once its module is imported
    output_bytes: int = MB  # the largest JSON answer read back

    @property
    def cpu_s(self) -> int:
        """RLIMIT_CPU: a backstop behind the wall-clock kill (whole seconds, at least 1)."""
        return max(1, math.ceil(self.wall_s) + 1)


@dataclass(frozen=True)
class Job:
    function: str  # "module:name" of a function `(args, frames) -> JSON value`
    args: dict[str, Any] = field(default_factory=dict)  # JSON-serialisable
    frames: Iterable[bytes] = ()  # input streamed to the child after the header


@dataclass(frozen=True)
class Done:
    value: Any


@dataclass(frozen=True)
class JobFailed:
    kind: Failure
    detail: str


def _frame(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


@dataclass
class _Kill:
    """Why the child was killed by us (the first reason wins)."""

    process: subprocess.Popen[bytes]
    reason: Failure | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, reason: Failure) -> None:
        with self.lock:
            if self.reason is None and self.process.poll() is None:
                self.reason = reason
                self.process.kill()


def _feed(process: subprocess.Popen[bytes], header: bytes, frames: Iterable[bytes], errors: list[BaseException]) -> None:
    """Writer thread: the header, then every frame, then end of file; stops when the child is gone."""
    stdin = process.stdin
    assert stdin is not None
    try:
        stdin.write(_frame(header))
        for frame in frames:
            stdin.write(_frame(frame))
    except (BrokenPipeError, ConnectionResetError, ValueError):
        pass  # the child stopped reading (it finished early, failed, or was killed)
    except BaseException as error:  # the caller's input failed: reported to the caller
        errors.append(error)
    finally:
        try:
            stdin.close()
        except OSError:
            pass


def _interpret(returncode: int, raw: bytes, limits: Limits) -> Done | JobFailed:
    if returncode == EXIT_NO_MEMORY:
        return JobFailed(Failure.MEMORY, "the job ran out of its memory budget")
    if returncode == -signal.SIGXCPU:
        return JobFailed(Failure.TIMEOUT, f"the job used more than {limits.cpu_s} s of CPU")
    if returncode != 0:
        return JobFailed(Failure.CRASHED, f"the worker exited with status {returncode}")
    try:
        answer = json.loads(raw)
    except ValueError:
        return JobFailed(Failure.CRASHED, "the worker's answer is not JSON")
    if not isinstance(answer, dict):
        return JobFailed(Failure.CRASHED, "the worker's answer is not an object")
    if answer.get("ok") is True:
        return Done(answer.get("value"))
    try:
        kind = Failure(answer.get("kind"))
    except ValueError:
        kind = Failure.CRASHED
    return JobFailed(kind, str(answer.get("detail", ""))[:500])


def run(job: Job, limits: Limits, cancel: CancelToken = NEVER) -> Done | JobFailed:
    """Run `job` in a new limited child; see the module docstring for the outcomes."""
    header = json.dumps({"function": job.function, "args": job.args, "memory_bytes": limits.memory_mb * MB,
                         "cpu_s": limits.cpu_s, "output_bytes": limits.output_bytes}).encode()
    process = subprocess.Popen(
        [sys.executable, "-I", "-c", BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env=CHILD_ENV, cwd=ROOT, close_fds=True,
    )
    kill = _Kill(process)
    timer = threading.Timer(limits.wall_s, kill, (Failure.TIMEOUT,))
    timer.daemon = True
    timer.start()
    remove = cancel.on_cancel(lambda: kill(Failure.CANCELLED))
    errors: list[BaseException] = []
    writer = threading.Thread(target=_feed, args=(process, header, job.frames, errors), daemon=True,
                              name="bounded-feed")
    writer.start()
    try:
        assert process.stdout is not None
        raw = process.stdout.read(limits.output_bytes + 1)
        if len(raw) > limits.output_bytes:
            kill(Failure.TOO_LARGE)
        process.wait()
    finally:
        timer.cancel()
        remove()
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()  # type: ignore[union-attr]
        writer.join()
    if errors:
        raise errors[0]
    if kill.reason is Failure.TOO_LARGE:
        return JobFailed(Failure.TOO_LARGE, f"the answer is larger than {limits.output_bytes} bytes")
    if kill.reason is not None:
        detail = "stopped" if kill.reason is Failure.CANCELLED else f"the job ran past {limits.wall_s:g} s"
        return JobFailed(kill.reason, detail)
    return _interpret(process.returncode, raw, limits)

