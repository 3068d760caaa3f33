"""The values of the server side: kinds of worker, jobs, limits, and how a job ended.

Every way a job can end is a value (`Done` or `JobFailed` with a `Failure` kind); a caller
turns it into its own error (a tool's `Error:` line, a SQL checker's message) in one place.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

MB = 1024 * 1024
CPU_SLACK_S = 2  # RLIMIT_CPU past a job's whole budget; the server's kill comes well before
BUSY_WAIT_S = 1.0  # a timeout after this long waiting for a worker is the server's business (`JobFailed.busy`)


class Failure(StrEnum):
    TIMEOUT = "timeout"  # killed at the wall deadline (or stopped by RLIMIT_CPU, the backstop)
    MEMORY = "memory"  # the job passed its address-space budget
    TOO_LARGE = "too_large"  # the answer was larger than `Limits.output_bytes`
    CANCELLED = "cancelled"  # the caller's CancelToken fired: the worker was killed at once
    CRASHED = "crashed"  # anything else: an exception in the job, a signal, a broken answer
    BUSY = "busy"  # no worker slot came free within the job's own deadline
    UNAVAILABLE = "unavailable"  # no worker could start, or its trusted set-up did not finish in time
    CLOSED = "closed"  # the pool is shut down


@dataclass(frozen=True)
class Kind:
    """A sort of untrusted work and the warm worker that does it.

    A worker imports `modules` (and runs `warm_up`, a `module:function` with no arguments)
    once, before its limits are set, so what a job may add is `memory_mb`; only functions of
    these modules can run in it. `site_packages=False` starts it with `-S` (stdlib-only
    kinds start in tens of milliseconds). Up to `keep_warm` idle workers of the kind are kept
    for the next job; a worker is replaced after `max_jobs` jobs or once it grew by
    `retire_growth_mb` of resident memory.
    """

    name: str
    modules: tuple[str, ...]
    memory_mb: int
    warm_up: str | None = None
    site_packages: bool = True
    keep_warm: int = 1
    max_jobs: int = 500
    retire_growth_mb: int = 24

    def spec(self) -> str:
        """What the worker process needs to know, as its command-line argument."""
        return json.dumps(
            {
                "kind": self.name,
                "modules": list(self.modules),
                "warm_up": self.warm_up,
                "memory_mb": self.memory_mb,
                "retire_growth_mb": self.retire_growth_mb,
                "max_jobs": self.max_jobs,
            }
        )


@dataclass(frozen=True)
class Limits:
    """One job's time and answer budget (its memory budget is its kind's).

    `wall_s` is the job's deadline, counted from when the caller asked: waiting for a free
    worker counts (a job that gets none within `wall_s` fails `busy`), so a tool never
    outlives it. A job with a trusted set-up (`setup_s` > 0: a task's SQL script) has
    `setup_s` for it, and its `wall_s` starts again when the job says its untrusted part
    starts (`Inputs.started()`), so neither its wait nor its set-up shortens that part.
    """

    wall_s: float
    output_bytes: int = MB  # the largest JSON answer read back
    setup_s: float = 0.0

    @property
    def cpu_s(self) -> int:
        """RLIMIT_CPU for the job: a backstop behind the wall-clock kill (whole seconds)."""
        return math.ceil(self.setup_s + self.wall_s) + CPU_SLACK_S


@dataclass(frozen=True)
class Job:
    function: str  # "module:name" of a function `(args, inputs) -> JSON value`, in a module of the kind
    args: dict[str, Any] = field(default_factory=dict)  # JSON-serialisable
    frames: Iterable[bytes] = ()  # input streamed to the worker after the header, read lazily


@dataclass(frozen=True)
class Done:
    value: Any


@dataclass(frozen=True)
class JobFailed:
    kind: Failure
    detail: str
    waited_s: float = field(default=0.0, compare=False)  # of its deadline, spent waiting for a free worker

    @property
    def busy(self) -> bool:
        """Others held the workers: none came free in time, or the job ran out of time after
        waiting at least `BUSY_WAIT_S` for one (the input was not necessarily at fault)."""
        return self.kind is Failure.BUSY or (self.kind is Failure.TIMEOUT and self.waited_s >= BUSY_WAIT_S)
