"""While an MCP server is down: one fast, honest failure per call instead of a wait (SPEC 14).

A connection whose last try failed is *known down* until its next try (`Outage`). A call that
arrives then does not wait its whole deadline for a session that cannot come: it fails at once
with `Unavailable`, whose text says when the next try is due ("unavailable (reconnecting in
12 s)"), unless that try is due within `WAIT_FOR_TRY_S` (a crashed child restarting): then it
waits for it. But a back-off grows to 30 s, and a server that came back would stay unreachable that
long; so a call that arrives at least `PROMPT_AFTER_S` after the last failed try cuts the
back-off short with ONE immediate try, and waits for its outcome only. So a down server costs
at most one connection attempt per `PROMPT_AFTER_S` however many calls arrive, and a server
that came back is reached by the first call after that.

Imports: nothing of ours (the connection and the tool binding use it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PROMPT_AFTER_S = 2.0  # after a failed try, calls fail at once this long before one may try again
WAIT_FOR_TRY_S = 1.0  # a try due this soon is waited for (a child restarting after a crash)


class Unavailable(Exception):
    """The server is known down: no session, and no try allowed before `retry_in_s`."""

    def __init__(self, key: str, retry_in_s: float, reason: str | None) -> None:
        self.key, self.retry_in_s, self.reason = key, retry_in_s, reason
        seconds = max(1, math.ceil(retry_in_s))
        why = f": {reason}" if reason else ""
        super().__init__(f"the MCP server {key} is unavailable (reconnecting in {seconds} s){why}")


@dataclass(frozen=True)
class Outage:
    """One back-off: when the last try failed and when the next one is due (monotonic seconds)."""

    failed_at: float
    retry_at: float

    def retry_in(self, now: float) -> float:
        return max(0.0, self.retry_at - now)

    def due_soon(self, now: float, budget_s: float) -> bool:
        """Whether the scheduled try comes soon enough, and within the call's time, to wait for."""
        return self.retry_in(now) <= min(WAIT_FOR_TRY_S, budget_s)

    def may_prompt(self, now: float) -> bool:
        """Whether a call arriving `now` may cut this back-off short with a try of its own."""
        return now - self.failed_at >= PROMPT_AFTER_S
