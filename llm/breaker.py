"""A circuit breaker per provider: after repeated faults of the server, fail fast for a while.

A hung provider (it takes the connection and never answers) costs every call the whole
`LLM_TIMEOUT_S`, and a turn makes two calls (the retry of SPEC 6.4): 2 x 120 s per turn, for
every user at once. So after `failures` consecutive calls that ended with a fault of the
server (`FAULTS`), the provider's circuit opens: its calls are refused at once for
`cooldown_s` and the fallback chain goes straight to the next provider. Then one call is let
through as a probe (half-open) while the others are still refused; its success closes the
circuit, its failure opens it for another cool-down.

What counts (SPEC 7a.1: only faults of the server):

- `FAULTS`: a refused, reset or cut connection (CONNECTION), a 5xx (SERVER_ERROR), a reply
  that cannot be read (MALFORMED) or that carries the upstream's error (UPSTREAM_ERROR), no
  first token within `LLM_TIMEOUT_S` (TIMEOUT), and an answer that started and then stopped
  coming for `LLM_IDLE_TIMEOUT_S` (IDLE_TIMEOUT: the server stopped sending in the middle of
  a stream; a long answer that keeps streaming never ends this way, so it never counts).
- A success, or a blank reply (EMPTY: the server answered in time), closes the circuit and
  ends the streak.
- Everything else counts for nothing and ends nothing (`NEUTRAL`): a user's cancel, a 4xx our
  request caused (CLIENT_ERROR, AUTH: the model name, the key, the context size are ours to
  fix, and opening the circuit would refuse every other user's good requests too), a 429
  (RATE_LIMITED: the server is up and answering at once; it asked us to slow down, and its
  `Retry-After` is honoured in `llm/http.py`, so failing fast would save no time), a missing
  key or script. A neutral probe (half-open) lets the next call probe at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from llm.base import FailureKind

FAULTS = frozenset(
    {
        FailureKind.TIMEOUT,
        FailureKind.IDLE_TIMEOUT,
        FailureKind.CONNECTION,
        FailureKind.SERVER_ERROR,
        FailureKind.MALFORMED,
        FailureKind.UPSTREAM_ERROR,
    }
)
HEALTHY = frozenset({None, FailureKind.EMPTY})
NEUTRAL = frozenset(set(FailureKind) - FAULTS - HEALTHY)
State = Literal["closed", "open", "half_open"]


@dataclass(frozen=True)
class BreakerPolicy:
    """`failures` consecutive faults of the server (`FAULTS`) open the circuit for `cooldown_s`."""

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
            if failure in HEALTHY:
                self._state, self._failures = "closed", 0
                return
            if failure not in FAULTS:  # NEUTRAL: says nothing about the server's health
                if self._state == "half_open":
                    self._state, self._open_until = "open", self._clock()  # the next call probes
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
            f"circuit open after {state.failures} consecutive server faults (timeouts, refused or cut "
            "connections, 5xx, unreadable replies); "
            f"next try at {state.retry_at}"
        )
