"""What a provider's last real call said about it, for the model banner, `/health` and the admin page.

The health probe (`providers.ProviderProbe`) asks a server for its model list: cheap, but a
server can answer that and still never answer a chat (it hangs after the headers, it answers
500), and the probe is reused for up to 30 s. A turn's calls are better evidence, and fresher:
the model banner should show as soon as a turn failed and go as soon as one got its answer.

`LastCall` keeps one provider's last call: whether it answered, when, and for a failure its
kind, status and detail (operator words: they go to `/health` and the admin page, never to a
user). `newer_than` says which evidence wins against a probe: a successful call beats any
older probe; a failed call beats a later successful probe for `FAILURE_TRUSTED_S` (a probe
that lists the models says nothing about a chat that hangs or answers 500), after which the
probe speaks again, so a model that came back shows as answering even when nobody has sent
anything; a failure the probe can see end (a server that could not be reached, a refused key)
is over as soon as a later probe succeeds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from llm.base import Completion, FailureKind

FAILURE_TRUSTED_S = 60.0  # how long a failed call outranks a later successful probe


@dataclass(frozen=True)
class CallRecord:
    """One finished call (never its text): `at` is `time.monotonic()`, `at_utc` for people."""

    ok: bool
    at: float
    at_utc: str
    failure: FailureKind | None = None
    status_code: int | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "at": self.at_utc,
            "failure": self.failure.value if self.failure else None,
            "status_code": self.status_code,
            "detail": self.detail,
        }


class LastCall:
    """One provider's last real call and its last failure; thread-safe (turns run on many threads)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last: CallRecord | None = None
        self._last_failure: CallRecord | None = None

    def record(self, completion: Completion) -> None:
        """A call that reached the provider ended (a cancel says nothing of the server: ignored)."""
        if completion.failure is FailureKind.CANCELLED:
            return
        record = CallRecord(
            ok=completion.text is not None,
            at=self._clock(),
            at_utc=datetime.now(UTC).isoformat(timespec="milliseconds"),
            failure=completion.failure,
            status_code=completion.status_code,
            detail=completion.detail,
        )
        with self._lock:
            self._last = record
            if not record.ok:
                self._last_failure = record

    @property
    def last(self) -> CallRecord | None:
        with self._lock:
            return self._last

    @property
    def last_failure(self) -> CallRecord | None:
        with self._lock:
            return self._last_failure

    def verdict(self, probed_at: float, probe_ok: bool) -> bool:
        """Can the provider answer, from the probe made at `probed_at` (monotonic) and this call?"""
        last = self.last
        if last is None:
            return probe_ok
        if last.ok:
            return True if last.at >= probed_at else probe_ok
        if last.at >= probed_at:
            return False
        if self._probe_sees(last) or self._clock() - last.at >= FAILURE_TRUSTED_S:
            return probe_ok
        return False

    @staticmethod
    def _probe_sees(record: CallRecord) -> bool:
        """A failure a later probe can tell is over: a server that could not be reached (the
        probe reached it) or a refused key (the probe's key was taken)."""
        unreachable = record.failure is FailureKind.CONNECTION and record.status_code is None
        return unreachable or record.failure in (FailureKind.AUTH, FailureKind.NOT_CONFIGURED)
