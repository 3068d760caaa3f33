"""Waiting in tests without betting on how fast a shared machine is.

A test that sleeps a fixed time and then asserts races the code under test; a test that
asserts an upper bound on wall time fails whenever the machine is busy. These helpers
replace both: `wait_until` polls a condition (its timeout only stops a hung test, it is never
the assertion), and `ReapedCpu` measures the CPU time of the child processes reaped while it
was open, which a loaded machine does not inflate (a worker that gets no CPU uses none), so
"the worker was killed at its deadline" can be checked as "it did not burn the CPU its
uncapped work needs".
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from types import TracebackType

HUNG_S = 30.0  # a condition not met after this long is a hung test, not a slow machine
POLL_S = 0.02


def wait_until(condition: Callable[[], object], what: str, timeout_s: float = HUNG_S) -> None:
    """Return once `condition()` is truthy; fail with `what` if it never is (a hung test)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s:g} s"
        time.sleep(POLL_S)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class ReapedCpu:
    """CPU seconds (user + system) of the children this process reaped inside the `with` block.

    Only children that were waited for count (the kernel adds a child's time to its parent's
    when it is reaped), so a worker killed and reaped inside the block counts in full,
    start-up included, and a worker still alive at the end counts nothing.
    """

    def __init__(self) -> None:
        self._before = 0.0
        self.seconds = 0.0

    def __enter__(self) -> ReapedCpu:
        self._before = _children_cpu_s()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.seconds = _children_cpu_s() - self._before
