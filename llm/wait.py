"""A turn's wait for its model: how long it may go without a first token, all calls together.

Each provider call has its own first-token deadline (`LLM_TIMEOUT_S`), and a pass may make
several calls: the one retry of SPEC 6.4, each through the fallback chain. Without a bound on
their sum, a model that sends headers and then nothing kept a user waiting 2 retries x 2
providers x 120 s. A `TurnWait` is that bound (`LLM_WAIT_S`): every call of one turn draws its
time before the first token from it, a call's deadline is the sooner of its own and what is
left, and once it is used up no further call (retry or fallback) is made.

Only the wait counts: from a call's start to its first piece of text (or to its end, when no
text came). An answer that streams for minutes is never cut by it, as by no other timer.

A `TurnWait` is also what one turn's calls share for the circuit breaker (`llm/breaker.py`):
a turn's retry and fallbacks are one piece of evidence about a server, never several.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from llm.base import Completion


class TurnWait:
    """The wait for a first token left to one turn; used by that turn's thread only."""

    def __init__(self, wait_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_s = wait_s
        self._clock = clock
        self._spent_s = 0.0

    @property
    def spent_s(self) -> float:
        return self._spent_s

    def remaining_s(self) -> float:
        return max(0.0, self.wait_s - self._spent_s)

    def exhausted(self) -> bool:
        """No time is left: the turn makes no further call."""
        return self.remaining_s() <= 0.0

    def deadline(self, timeout_s: float) -> float:
        """The first-token deadline (a `time.monotonic()` value) of a call that starts now and
        would wait `timeout_s` on its own: the sooner of that and what the turn has left."""
        return self._clock() + min(timeout_s, self.remaining_s())

    def spend(self, completion: Completion) -> None:
        """Count a finished call's wait: until its first text, or all of it when none came."""
        waited_ms = completion.first_text_ms if completion.first_text_ms is not None else completion.elapsed_ms
        self._spent_s += max(0.0, waited_ms) / 1000.0

    def spend_s(self, seconds: float) -> None:
        """Count a wait that was not a streamed call's (a read of probabilities, SPEC 6.11)."""
        self._spent_s += max(0.0, seconds)
