"""A circuit breaker per provider: after repeated timeouts, fail fast for a while.

A hung provider (it takes the connection and never answers) costs every call the whole
`LLM_TIMEOUT_S`, and a turn makes two calls (the retry of SPEC 6.4): 2 x 120 s per turn, for
every user at once. So after `failures` consecutive calls that ended the way a hung or
unreachable server ends them (TIMEOUT, CONNECTION), the provider's circuit opens: its calls
are refused at once for `cooldown_s` and the fallback chain goes straight to the next
provider. Then one call is let through as a probe (half-open) while the others are still
refused; its success closes the circuit, its failure opens it for another cool-down.

Any other outcome (text, an HTTP error, a rate limit, a malformed reply) comes from a server
that answers, so it ends the streak. A cancelled call says nothing about the server: it is
not counted, and a cancelled probe lets the next call probe at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from llm.base import FailureKind

TRIPPING = frozenset({FailureKind.TIMEOUT, FailureKind.CONNECTION})
State = Literal["closed", "open", "half_open"]


@dataclass(frozen=True)
class BreakerPolicy:
    """`failures` consecutive timeouts or connection failures open the circuit for `cooldown_s`."""

    failures: int = 3
    cooldown_s: float = 30.0


@dataclass(frozen=True)
class BreakerState:
    """What `/health` shows of one provider's circuit; `retry_at` (UTC) while it is open."""

    state: State
    failures: int
    retry_at: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "failures": self.failures, "retry_at": self.retry_at}


class CircuitBreaker:
    """The circuit of one provider; thread-safe (turns run on many threads)."""

    def __init__(self, policy: BreakerPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._state: State = "closed"
        self._failures = 0
        self._open_until = 0.0

    def admit(self) -> bool:
        """May a call go ahead now? True when closed, or for the one probe after the cool-down."""
        with self._lock:
            if self._state == "closed":
                return True
            if self._state == "open" and self._clock() >= self._open_until:
                self._state = "half_open"  # this caller is the probe; the others wait for its outcome
                return True
            return False

    def record(self, failure: FailureKind | None) -> None:
        """The outcome of an admitted call (None: it succeeded)."""
        with self._lock:
            if failure is FailureKind.CANCELLED:
                if self._state == "half_open":
                    self._state, self._open_until = "open", self._clock()  # the next call probes
                return
            if failure not in TRIPPING:
                self._state, self._failures = "closed", 0
                return
            self._failures += 1
            if self._state == "half_open" or self._failures >= self.policy.failures:
                self._state, self._open_until = "open", self._clock() + self.policy.cooldown_s

    def snapshot(self) -> BreakerState:
        with self._lock:
            retry_at = None
            if self._state != "closed":
                wait_s = max(0.0, self._open_until - self._clock())
                retry_at = datetime.fromtimestamp(time.time() + wait_s, UTC).isoformat(timespec="seconds")
            return BreakerState(self._state, self._failures, retry_at)

    def refusal_detail(self) -> str:
        """Why a call was refused, for the Completion's `detail` (logs and events)."""
        state = self.snapshot()
        return (
            f"circuit open after {state.failures} consecutive timeouts or connection failures; "
            f"next try at {state.retry_at}"
        )
