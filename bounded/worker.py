"""The server's side of one worker process: start it, run one job on it, kill it.

Why a process: the limits must hold inside the engine (a regex compile, a parser building
its tree, one SQLite call), where no Python-level check runs. A worker has its own address
space, capped with `RLIMIT_AS`, and can be killed at any instant; a thread can be neither.
Forking the server would copy a multi-threaded process (locks held by other threads, open
database connections), so a worker is a new interpreter (`python -I`, `bounded.child`).

`Worker.run(job, limits, cancel, since)` sends the job's header, streams its input frames
on a writer thread (so neither side can block the other and the caller never holds a large
input whole; a small job without input is written at once, as the pipe's buffer holds it),
and waits for the answer with `poll` (never `select`: the server's descriptors go past
1024). It kills the worker `KILL_GRACE_S` past the job's deadline (the
job's own timeout answer, which can say more, wins within that grace), when the cancel
token fires, or when the answer is over its size; it never raises for what the job or its
input did, except that an exception of the caller's own input iterator is re-raised.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bounded.child import EXIT_NO_MEMORY
from bounded.jobs import Done, Failure, Job, JobFailed, Kind, Limits
from bounded.protocol import END_FRAME, HEADER, ProtocolError, decode, encode, frame
from foundation.cancellation import CancelToken

ROOT = Path(__file__).resolve().parent.parent
BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from bounded.child import main; main(sys.argv[2:])"
WORKER_ENV = {"LC_ALL": "C.UTF-8"}  # nothing of the server's environment (API keys) reaches a worker
KILL_GRACE_S = 0.25  # past the deadline, for the job's own timeout answer to arrive
FRAME_SLACK_BYTES = 1024  # an answer's frame is its JSON plus the retire flag
INLINE_HEADER_BYTES = 32 * 1024  # a job without input and a header this small is written without a thread


class WorkerGone(Exception):
    """The worker closed its pipe (it died or was killed) or broke the protocol."""


class _Feeder(threading.Thread):
    """Writes the header, each input frame as the iterator yields it, then END.

    Stops early (still writing END) once `stop` is set: the job answered and the worker is
    skipping the rest. A failure of the caller's iterator is kept in `error`; a closed pipe
    (the worker is gone) just ends the thread."""

    def __init__(self, stdin: IO[bytes], header: bytes, frames: Iterable[bytes]) -> None:
        super().__init__(name="bounded-feed", daemon=True)
        self._stdin, self._header, self._frames = stdin, header, frames
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._write(frame(self._header))
            items = iter(self._frames)
            while not self.stop.is_set():
                try:
                    data = next(items)
                except StopIteration:
                    break
                except BaseException as error:  # the caller's input failed: re-raised to the caller
                    self.error = error
                    break
                self._write(frame(data))
            self._write(END_FRAME)
        except (OSError, ValueError):
            pass  # the worker is gone (a broken pipe, or a pipe closed by a kill)

    def _write(self, data: bytes) -> None:
        self._stdin.write(data)
        self._stdin.flush()


@dataclass(eq=False)  # identity: workers live in sets
class Worker:
    kind: Kind
    process: subprocess.Popen[bytes]
    idle_since: float = 0.0  # time.monotonic() when it was last given back
    reusable: bool = False  # the last job answered and the worker stays (no kill, no retire)
    killed_for: Failure | None = None  # why we killed it (the first reason wins)
    _buffer: bytearray = field(default_factory=bytearray)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(cls, kind: Kind) -> Worker:
        """Raises OSError when no process can start (process or descriptor limits)."""
        flags = ["-I"] if kind.site_packages else ["-I", "-S"]
        process = subprocess.Popen(
            [sys.executable, *flags, "-c", BOOT, str(ROOT), kind.spec()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=WORKER_ENV,
            cwd=ROOT,
            close_fds=True,
        )
        return cls(kind, process)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self, reason: Failure | None = None) -> None:
        """SIGKILL, noting why (the first reason wins); safe from any thread (a cancel, a close).

        It only signals: the pipes are closed by `reap`, on the thread that owns the worker,
        so a descriptor the owner is polling is never closed (and reused) under it."""
        with self._lock:
            if self.killed_for is None and self.process.poll() is None:
                self.killed_for = reason
            try:
                self.process.kill()
            except OSError:
                pass

    def reap(self) -> None:
        """Kill, wait for the exit, close the pipes: by the worker's owner (or for an idle worker)."""
        self.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass

    # ------------------------------------------------------------------ one job

    def run(self, job: Job, limits: Limits, cancel: CancelToken, since: float) -> Done | JobFailed:
        """Run `job`; `since` is when the caller got its slot (a cold start of this worker counts)."""
        assert self.process.stdin is not None
        self.reusable = False
        left = limits.wall_s if limits.setup_s > 0 else max(0.0, since + limits.wall_s - time.monotonic())
        header = encode(
            {
                "function": job.function,
                "args": job.args,
                "cpu_s": limits.cpu_s,
                "output_bytes": limits.output_bytes,
                "seconds_left": left,
            }
        )
        remove = cancel.on_cancel(lambda: self.kill(Failure.CANCELLED))
        feeder: _Feeder | None = None
        try:
            if job.frames == () and len(header) <= INLINE_HEADER_BYTES:
                self._send_inline(header)  # fits in the pipe's buffer: no thread needed
            else:
                feeder = _Feeder(self.process.stdin, header, job.frames)
                feeder.start()
            outcome = self._await(limits, since)
        finally:
            remove()
            if feeder is not None:
                feeder.stop.set()
                feeder.join()
        if feeder is not None and feeder.error is not None:
            raise feeder.error
        return outcome

    def _send_inline(self, header: bytes) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(frame(header) + END_FRAME)
            self.process.stdin.flush()
        except (OSError, ValueError):
            pass  # the worker is gone: `_await` reads why

    def _await(self, limits: Limits, since: float) -> Done | JobFailed:
        setting_up = limits.setup_s > 0
        until = time.monotonic() + limits.setup_s if setting_up else since + limits.wall_s + KILL_GRACE_S
        while True:
            try:
                message = self._receive(until, limits.output_bytes + FRAME_SLACK_BYTES)
            except WorkerGone:
                return self._ended(limits)
            if message is None:  # its time is up
                self.kill(Failure.UNAVAILABLE if setting_up else Failure.TIMEOUT)
                return self._ended(limits)
            if message.get("phase") == "started" and setting_up:
                setting_up, until = False, time.monotonic() + limits.wall_s + KILL_GRACE_S
                continue
            return self._answer(message)

    def _answer(self, message: dict[str, Any]) -> Done | JobFailed:
        self.reusable = message.get("retire") is False
        if message.get("ok") is True:
            return Done(message.get("value"))
        try:
            kind = Failure(str(message.get("kind")))
        except ValueError:
            kind = Failure.CRASHED
        return JobFailed(kind, str(message.get("detail", ""))[:500])

    def _ended(self, limits: Limits) -> JobFailed:
        """Why the worker is gone: our kill's reason, or its exit status."""
        self.reusable = False
        returncode = self.process.wait()
        reason = self.killed_for
        if reason is Failure.TIMEOUT:
            return JobFailed(reason, f"the job ran past {limits.wall_s:g} s")
        if reason is Failure.UNAVAILABLE:
            return JobFailed(reason, f"the worker did not finish the job's set-up within {limits.setup_s:g} s")
        if reason is Failure.TOO_LARGE:
            return JobFailed(reason, f"the answer is larger than {limits.output_bytes} bytes")
        if reason is Failure.CANCELLED:
            return JobFailed(reason, "stopped")
        if reason is Failure.CLOSED:
            return JobFailed(reason, "the worker pool is shut down")
        if reason is Failure.CRASHED:
            return JobFailed(reason, "the worker's answer broke the protocol")
        if returncode == EXIT_NO_MEMORY:
            return JobFailed(Failure.MEMORY, "the job ran out of its memory budget")
        if returncode == -signal.SIGXCPU:
            return JobFailed(Failure.TIMEOUT, f"the job used more than {limits.cpu_s} s of CPU")
        return JobFailed(Failure.CRASHED, f"the worker exited with status {returncode}")

    def _receive(self, until: float, limit: int) -> dict[str, Any] | None:
        """The next message, or None when `until` (a monotonic time) passes first."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while True:
            message = self._take_message(limit)
            if message is not None:
                return message
            left = until - time.monotonic()
            if left <= 0:
                return None
            if not poller.poll(max(1, int(left * 1000))):
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError as error:
                raise WorkerGone(str(error)) from None
            if not chunk:
                raise WorkerGone("the worker closed its pipe")
            self._buffer += chunk

    def _take_message(self, limit: int) -> dict[str, Any] | None:
        if len(self._buffer) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self._buffer)
        if size > limit:
            self.kill(Failure.TOO_LARGE)
            raise WorkerGone(f"an answer of {size} bytes")
        if len(self._buffer) < HEADER.size + size:
            return None
        body = bytes(self._buffer[HEADER.size : HEADER.size + size])
        del self._buffer[: HEADER.size + size]
        try:
            return decode(body)
        except (ProtocolError, ValueError) as error:
            self.kill(Failure.CRASHED)
            raise WorkerGone(f"an unreadable answer: {error}") from None
