"""The server side of the SQL box: a few warm workers, a deadline that kills, a cancel that kills.

`SqlBox.run_memory(job)` / `run_select(job)` take a worker (an idle warm one, or a new one:
`python -I -S` plus this package starts in tens of milliseconds), send the job, and wait on
the pipe with `poll` (never `select`: the server's descriptors go past 1024):

1. until the worker says the untrusted statement starts (trusted set-up, `SETUP_TIMEOUT_S`);
2. then at most the job's deadline plus `KILL_GRACE_S`. The worker's own progress handler
   answers TIMEOUT at the deadline for ordinary loops; a worker that does not answer (one
   function call running on, or memory being allocated) is killed with SIGKILL.

A worker that answered is kept for the next job (at most `idle` of them, for at most
`IDLE_REUSE_S`) unless it retired itself; one that was killed, died (its address-space or CPU limit) or sent garbage is
reaped and forgotten. At most `max_workers` jobs run at once; more wait for a free worker
within their own deadline. `close()` (also run when the box is garbage-collected or the
interpreter exits) kills every worker; a worker whose server died reads end-of-file and exits.
"""

from __future__ import annotations

import logging
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cancellation import NEVER, CancelToken
from sqlbox.protocol import (
    HEADER,
    MAX_REPLY_BYTES,
    Job,
    MemoryAnswer,
    MemoryJob,
    SelectAnswer,
    SelectJob,
    SqlError,
    decode,
    encode,
    job_to_dict,
    memory_answer_from_dict,
    select_answer_from_dict,
    timeout_error,
)

log = logging.getLogger("sqlbox")

ROOT = Path(__file__).resolve().parent.parent
BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from sqlbox.worker import main; main(sys.argv[2:])"
WORKER_ENV = {"LC_ALL": "C.UTF-8"}  # nothing of the server's environment (API keys) reaches a worker
KILL_GRACE_S = 0.25  # after the deadline, for the worker's own TIMEOUT answer to arrive
SETUP_TIMEOUT_S = 5.0  # trusted set-up: start-up, views, a task's setup script
DEFAULT_MAX_WORKERS = 4
DEFAULT_IDLE_WORKERS = 2
DEFAULT_MEMORY_MB = 64  # address space each worker may add to its start-up size
IDLE_REUSE_S = 600  # an idle worker older than this is replaced (it exits by itself at twice that)


class WorkerGone(Exception):
    """The worker closed its pipe (it died) or broke the protocol."""


@dataclass(eq=False)  # identity: workers live in a set
class Worker:
    """One worker process and the bytes read from it so far."""

    process: subprocess.Popen[bytes]
    buffer: bytearray = field(default_factory=bytearray)
    idle_since: float = 0.0  # time.monotonic() when it was last given back

    @classmethod
    def start(cls, memory_mb: int) -> Worker:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", BOOT, str(ROOT), str(memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True, env=WORKER_ENV,
        )
        return cls(process)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(encode(message))
            self.process.stdin.flush()
        except (OSError, ValueError) as error:  # BrokenPipe, or a pipe closed by a kill
            raise WorkerGone(str(error)) from None

    def receive(self, until: float) -> dict[str, Any] | None:
        """The next frame, or None when `until` (a monotonic time) passes first."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while True:
            frame = self._take_frame()
            if frame is not None:
                return frame
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
            self.buffer += chunk

    def _take_frame(self) -> dict[str, Any] | None:
        if len(self.buffer) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self.buffer)
        if size > MAX_REPLY_BYTES:
            raise WorkerGone(f"a reply of {size} bytes")
        if len(self.buffer) < HEADER.size + size:
            return None
        body = bytes(self.buffer[HEADER.size:HEADER.size + size])
        del self.buffer[:HEADER.size + size]
        try:
            return decode(body)
        except ValueError as error:
            raise WorkerGone(f"an unreadable reply: {error}") from None

    def kill(self) -> None:
        """SIGKILL and reap; safe to call twice and from another thread (a cancel)."""
        try:
            self.process.kill()
        except OSError:
            pass
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass


def _kill_all(workers: set[Worker]) -> None:
    for worker in list(workers):
        worker.kill()
    workers.clear()


class SqlBox:
    """Runs SQL jobs in worker processes; one per app (`create_app`), shared by its threads."""

    def __init__(self, *, max_workers: int = DEFAULT_MAX_WORKERS, idle_workers: int = DEFAULT_IDLE_WORKERS,
                 memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        self.memory_mb = memory_mb
        self.idle_workers = idle_workers
        self._slots = threading.BoundedSemaphore(max_workers)
        self._lock = threading.Lock()
        self._idle: list[Worker] = []
        self._workers: set[Worker] = set()
        self._closed = False
        self._finalizer = weakref.finalize(self, _kill_all, self._workers)

    # ------------------------------------------------------------------ public

    def run_memory(self, job: MemoryJob, cancel: CancelToken = NEVER) -> MemoryAnswer | SqlError:
        reply = self._run(job, cancel)
        return reply if isinstance(reply, SqlError) else memory_answer_from_dict(reply)

    def run_select(self, job: SelectJob, cancel: CancelToken = NEVER) -> SelectAnswer | SqlError:
        reply = self._run(job, cancel)
        return reply if isinstance(reply, SqlError) else select_answer_from_dict(reply)

    def worker_pids(self) -> list[int]:
        """Live workers, busy or idle (for tests and the operator)."""
        with self._lock:
            return [worker.process.pid for worker in self._workers if worker.alive]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._idle.clear()
        self._finalizer()

    def __enter__(self) -> SqlBox:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------------ one job

    def _run(self, job: Job, cancel: CancelToken) -> dict[str, Any] | SqlError:
        cancel.raise_if_cancelled()
        if not self._slots.acquire(timeout=max(job.deadline_s, 0.01)):
            return SqlError("UNAVAILABLE", "every SQL worker is busy; try again in a moment.")
        try:
            try:
                worker = self._take()
            except OSError as error:  # no process could start (process or descriptor limits)
                log.warning("no SQL worker could start: %s", error)
                return SqlError("UNAVAILABLE", "the SQL engine cannot start a worker now; try again later.")
            if worker is None:
                return SqlError("UNAVAILABLE", "the SQL engine is shut down.")
            remove = cancel.on_cancel(worker.kill)
            try:
                outcome = self._exchange(worker, job)
            finally:
                remove()
            if isinstance(outcome, dict) and not outcome.get("retire"):
                self._give_back(worker)
            else:
                self._forget(worker)
            cancel.raise_if_cancelled()
            return self._result(outcome, worker, job)
        finally:
            self._slots.release()

    def _exchange(self, worker: Worker, job: Job) -> dict[str, Any] | SqlError | None:
        """Send the job and wait for its reply (None: the worker died); one past its time is killed."""
        try:
            worker.send(job_to_dict(job))
        except WorkerGone:
            return SqlError("UNAVAILABLE", "the SQL engine failed; try again.")
        try:
            frame = worker.receive(time.monotonic() + SETUP_TIMEOUT_S)
            if frame is None:
                worker.kill()
                return SqlError("UNAVAILABLE", "the SQL engine did not start the query in time; try again.")
            if frame.get("phase") == "query":
                frame = worker.receive(time.monotonic() + job.deadline_s + KILL_GRACE_S)
                if frame is None:
                    worker.kill()
                    return timeout_error(job.deadline_s)
        except WorkerGone:
            return None
        return frame

    @staticmethod
    def _result(outcome: dict[str, Any] | SqlError | None, worker: Worker, job: Job) -> dict[str, Any] | SqlError:
        if isinstance(outcome, SqlError):
            return outcome
        if outcome is None:  # the worker died: its CPU or address-space limit, or a crash
            code = worker.process.returncode
            log.warning("SQL worker %s ended with %s during a %s job", worker.process.pid, code, job.kind)
            return SqlError("TOO_LARGE", "the query was stopped: it needed more memory or time than allowed; "
                                         "add a LIMIT or select fewer or shorter values.")
        if outcome.get("ok"):
            return dict(outcome["answer"])
        error = outcome.get("error") or {}
        return SqlError(error.get("code", "UNAVAILABLE"), str(error.get("message", "the SQL engine failed")))

    # ------------------------------------------------------------------ the workers

    def _take(self) -> Worker | None:
        with self._lock:
            if self._closed:
                return None
            stale: list[Worker] = []
            found: Worker | None = None
            while self._idle and found is None:
                worker = self._idle.pop()
                if worker.alive and time.monotonic() - worker.idle_since < IDLE_REUSE_S:
                    found = worker
                else:
                    stale.append(worker)
                    self._workers.discard(worker)
        for worker in stale:
            worker.kill()
        if found is not None:
            return found
        worker = Worker.start(self.memory_mb)
        with self._lock:
            self._workers.add(worker)
            closed = self._closed
        if closed:
            self._forget(worker)
            return None
        return worker

    def _give_back(self, worker: Worker) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.idle_workers:
                worker.idle_since = time.monotonic()
                self._idle.append(worker)
                return
        self._forget(worker)

    def _forget(self, worker: Worker) -> None:
        worker.kill()
        with self._lock:
            self._workers.discard(worker)
