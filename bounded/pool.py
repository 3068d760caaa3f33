"""All untrusted work of one server, in at most `workers` limited worker processes.

`WorkerPool.run(kind, job, limits, cancel)` takes one of `workers` slots (the global cap,
`SANDBOX_WORKERS`: across every kind and every user), then a warm idle worker of the job's
kind or a new one, runs the job (`worker.Worker.run`) and gives the worker back or kills it.
A job's deadline (`Limits.wall_s`) counts from the moment it holds a slot: waiting for one is
bounded separately (below), so a user queued behind others still gets its whole second of work.

Why one cap over every kind: each worker may reach its start-up size plus its kind's
`memory_mb` (its `RLIMIT_AS`), so the server's memory stays under `workers` times that
whatever many users ask at once. The cap counts processes, idle ones included: a new
worker that would pass it first ends the longest-idle worker (of any kind). A job that
gets no slot waits at most its own deadline (`Limits.wall_s`), then fails `busy`, so
nobody's job waits for ever.

Fair share (SPEC 12): a job carries its user (`run(..., user=)`) and the slots are a
`foundation.fair_share.FairGate`: a slot that comes free goes to the waiting job whose user
holds the fewest slots (then the oldest), so one user looping slow jobs keeps at most the
slots it already holds, and another user's job starts at the next free slot, ahead of the
first user's queue. Running jobs are never pre-empted.

A worker is kept warm (at most its kind's `keep_warm`, for at most `IDLE_REUSE_S`) unless
it was killed (deadline, cancel, an answer too large), died, retired itself (memory,
growth, `max_jobs`), or the pool is closed. `close()` (also run when the pool is garbage
collected or the interpreter exits) kills every worker; a worker whose server died reads
end of file and exits (`bounded.child`).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from bounded.jobs import Done, Failure, Job, JobFailed, Kind, Limits
from bounded.worker import Worker
from foundation.cancellation import NEVER, CancelToken
from foundation.fair_share import FairGate

log = logging.getLogger("bounded")

DEFAULT_WORKERS = 4  # SANDBOX_WORKERS: a 2-core machine
IDLE_REUSE_S = 600  # an idle worker older than this is replaced (it exits by itself at twice that)


def _kill_all(lock: threading.Lock, workers: set[Worker], idle: list[Worker]) -> None:
    """Kill every worker; reap the idle ones here (a busy one is reaped by the thread running its job)."""
    with lock:
        every, idle_ones = list(workers), list(idle)
        idle.clear()
    for worker in every:
        worker.kill(Failure.CLOSED)
    for worker in idle_ones:
        worker.reap()


class WorkerPool:
    """One per app (`create_app`, `ToolContext.bounded`), shared by its threads."""

    def __init__(self, workers: int = DEFAULT_WORKERS, *, keep_warm: bool = True) -> None:
        if workers < 1:
            raise ValueError("a worker pool needs at least one worker")
        self.workers = workers
        self.keep_warm = keep_warm
        self._slots = FairGate(workers)
        self._lock = threading.Lock()
        self._idle: list[Worker] = []  # oldest first
        self._live: set[Worker] = set()  # every worker process, busy or idle
        self._starting = 0  # workers being started (counted against the cap)
        self._closed = False
        self._finalizer = weakref.finalize(self, _kill_all, self._lock, self._live, self._idle)

    # ------------------------------------------------------------------ public

    def run(
        self, kind: Kind, job: Job, limits: Limits, cancel: CancelToken = NEVER, *, user: int | None = None
    ) -> Done | JobFailed:
        """Run `job` for `user` in a worker of `kind`; every outcome is a value (see `jobs.Failure`)."""
        since = time.monotonic()
        if not self._slots.acquire(user, since + limits.wall_s, cancel):
            waited = time.monotonic() - since
            if cancel.cancelled:
                return JobFailed(Failure.CANCELLED, "stopped", waited)
            return JobFailed(Failure.BUSY, f"all {self.workers} workers stayed busy for {limits.wall_s:g} s", waited)
        holding = time.monotonic()
        waited = holding - since
        try:
            worker = self._take(kind)
            if isinstance(worker, JobFailed):
                return worker
            try:
                outcome = worker.run(job, limits, cancel, holding)
            finally:
                self._give_back(worker)
            return replace(outcome, waited_s=waited) if isinstance(outcome, JobFailed) else outcome
        finally:
            self._slots.release(user)

    def worker_pids(self, kind: Kind | None = None) -> list[int]:
        """Live workers, busy or idle (for tests and the operator)."""
        with self._lock:
            return [worker.pid for worker in self._live if worker.alive and kind in (None, worker.kind)]

    @property
    def slots(self) -> FairGate:
        """The fair-share gate of the workers (read by `/metrics`: waiting jobs, places held)."""
        return self._slots

    def waiting(self) -> int:
        """Jobs waiting for a free slot (for tests and the operator)."""
        return self._slots.waiting()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._finalizer()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------------ slots and workers

    def _take(self, kind: Kind) -> Worker | JobFailed:
        """An idle worker of `kind`, or a new one within the cap (ending idle ones to make room)."""
        with self._lock:
            if self._closed:
                return JobFailed(Failure.CLOSED, "the worker pool is shut down")
            now = time.monotonic()
            ended = [w for w in self._idle if not w.alive or now - w.idle_since >= IDLE_REUSE_S]
            found = next((w for w in reversed(self._idle) if w.kind == kind and w not in ended), None)
            if found is None and len(self._live) - len(ended) + self._starting >= self.workers:
                # the cap is reached, so an idle worker exists (busy ones hold the other slots): end the longest idle
                ended += [w for w in self._idle if w not in ended][:1]
            for worker in ended + ([found] if found else []):
                self._idle.remove(worker)
            if found is None:
                self._starting += 1
        for worker in ended:
            self._forget(worker)  # killed before a new process starts: the cap holds at every instant
        if found is not None:
            return found
        try:
            worker = Worker.start(kind)
        except OSError as error:
            log.warning("no %s worker could start: %s", kind.name, error)
            with self._lock:
                self._starting -= 1
            return JobFailed(Failure.UNAVAILABLE, f"no worker process could start ({error})")
        with self._lock:
            self._starting -= 1
            self._live.add(worker)
            closed = self._closed
        if closed:
            self._forget(worker)
            return JobFailed(Failure.CLOSED, "the worker pool is shut down")
        return worker

    def _give_back(self, worker: Worker) -> None:
        with self._lock:
            if (
                worker.reusable
                and worker.alive
                and self.keep_warm
                and not self._closed
                and sum(1 for idle in self._idle if idle.kind == worker.kind) < worker.kind.keep_warm
            ):
                worker.idle_since = time.monotonic()
                self._idle.append(worker)
                return
        self._forget(worker)

    def _forget(self, worker: Worker) -> None:
        worker.reap()
        with self._lock:
            self._live.discard(worker)


@contextmanager
def pool_or_own(found: object) -> Iterator[WorkerPool]:
    """The app's pool when `found` is one (`ToolContext.bounded`); else a one-off pool of
    one worker, used for this call and closed after it (the CLI, tests without an app)."""
    if isinstance(found, WorkerPool):
        yield found
        return
    with WorkerPool(1, keep_warm=False) as own:
        yield own
