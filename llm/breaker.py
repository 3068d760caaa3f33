"""A circuit breaker per provider: after repeated faults of the server, fail fast for a while.

A hung provider (it takes the connection and never answers) costs every call the whole
`LLM_TIMEOUT_S`, for every user at once. So after faults of the server (`FAULTS`) in
`failures` different turns in a row, the provider's circuit opens: its calls are refused at
once for `cooldown_s` and the fallback chain goes straight to the next provider. Then one call
is let through as a probe (half-open) while the others are still refused; its success closes
the circuit, its failure opens it for another cool-down.

A run of turns, never one turn's calls: a turn's retry (SPEC 6.4) and its fallbacks call the
same servers again within seconds, so their faults say nothing the first one did not. The
calls of one turn share a key (its `llm.wait.TurnWait`); a fault whose key was counted in the
current run is not counted again, also when other turns' faults came in between. One user's
failing turn (an HTTP 500, then its retry) therefore never opens the circuit and refuses every
other user's turns. A call without a key (a caller outside a turn) counts on its own.

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
    """Faults of the server (`FAULTS`) in `failures` turns in a row open the circuit for `cooldown_s`."""

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
        self._turns: list[object] = []  # the keys of the turns counted in the current run (identity)
        self._last_fault: FailureKind | None = None

    def admit(self) -> bool:
        """May a call go ahead now? True when closed, or for the one probe after the cool-down."""
        with self._lock:
            if self._state == "closed":
                return True
            if self._state == "open" and self._clock() >= self._open_until:
                self._state = "half_open"  # this caller is the probe; the others wait for its outcome
                return True
            return False

    def record(self, failure: FailureKind | None, turn: object | None = None) -> None:
        """The outcome of an admitted call (None: it succeeded); `turn`: the key shared by the
        calls of one turn (a turn already counted in this run is not counted again)."""
        with self._lock:
            if failure in HEALTHY:
                self._state, self._failures, self._turns = "closed", 0, []
                return
            if failure not in FAULTS:  # NEUTRAL: says nothing about the server's health
                if self._state == "half_open":
                    self._state, self._open_until = "open", self._clock()  # the next call probes
                return
            self._last_fault = failure
            probe = self._state == "half_open"
            if not probe and turn is not None and any(seen is turn for seen in self._turns):
                return  # this turn is counted already (its retry, a fallback of the same server)
            self._failures += 1
            if turn is not None:
                self._turns.append(turn)
            if probe or self._failures >= self.policy.failures:  # a failed probe: another cool-down
                self._state, self._open_until = "open", self._clock() + self.policy.cooldown_s
                self._turns = []  # no call is admitted until the probe: the next run starts there

    @property
    def last_fault(self) -> FailureKind | None:
        """The last server fault recorded (why the circuit is open, when it is)."""
        with self._lock:
            return self._last_fault

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
            f"circuit open after server faults in {state.failures} turns in a row (last: "
            f"{self.last_fault.value if self.last_fault else 'unknown'}); next try at {state.retry_at}"
        )
