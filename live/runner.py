"""Running a turn off the request's thread: claim the session, run the work on a worker, end it.

`POST /chat`, `POST /api/ai/tool-result`, `POST /v1/chat/completions` and
`POST /activities/generate` all hand a `TurnWork` (a function of a connection, an event sink
and the turn's cancel token that returns the turn's answer) to `TurnRunner.start`. The
session is claimed first (one turn at a time: `claim` raises `TurnInProgress`), then the work
runs on one of a bounded pool of worker threads (each keeps its SQLite connection), never on
the request's thread: closing the request never stops the turn, and waiting for it costs the
asyncio server no thread.

Whatever happens, the turn ends with exactly one terminal event and one `TurnOutcome` on its
lease: `done` with the answer (`TurnDone`), or `error` (`TurnFailure`, `failure_of`): the
provider chain did not answer (`provider_unavailable`), the database refused a write
(`storage_unavailable`), or anything else (`internal_error`). The `error` event's data is the
HTTP layer's rendering of the failure (`failure_event`, given where the app is built), so a
stream and a JSON answer of the same turn say the same thing.

This module imports nothing of the HTTP layer: its outcomes are values the HTTP layer maps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from foundation.cancellation import CancelToken
from live import Live
from live.turns import FailureCode, TurnDone, TurnFailure, TurnLease, TurnOutcome
from observe.telemetry import Telemetry
from pipeline.turn import EventSink, ProviderUnavailable, StorageUnavailable, TurnFailed
from storage.connection import DbConnection, Store
from storage.errors import storage_fault
from storage.messages import set_turn_error

log = logging.getLogger("turns")

TurnWork = Callable[[DbConnection, EventSink, CancelToken], dict[str, Any]]
FailureEvent = Callable[[TurnFailure], dict[str, Any]]  # the data of the `error` event ending a failed turn

STORAGE_MESSAGE = (
    "the database refused a write (it is locked, full or read-only); what was stored before is kept, retry later"
)
INTERNAL_MESSAGE = "the turn failed on the server; what was stored is kept"


def failure_of(error: Exception, lease: TurnLease) -> TurnFailure:
    """What a turn's exception means for its user; a bug is logged with its traceback."""
    code: FailureCode
    if isinstance(error, ProviderUnavailable):
        code, message = "provider_unavailable", error.public_message
    elif isinstance(error, StorageUnavailable) or storage_fault(error):  # a fault outside the turn's guard too
        code, message = "storage_unavailable", STORAGE_MESSAGE
    else:
        log.error("turn failed in session %s", lease.session_id, exc_info=error)
        code, message = "internal_error", INTERNAL_MESSAGE
    return TurnFailure(
        turn_id=lease.turn_id,
        session_id=lease.session_id,
        code=code,
        message=message,
        user_message_id=error.user_message_id if isinstance(error, TurnFailed) else None,
    )


class TurnRunner:
    """Starts turns on a bounded pool of worker threads; one instance per app."""

    def __init__(
        self,
        database: Store,
        live: Live,
        workers: int,
        failure_event: FailureEvent,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.database = database
        self.telemetry = telemetry or Telemetry.off()
        self.live = live
        self.failure_event = failure_event
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="turn")

    def claim(self, session_id: str, kind: str = "chat") -> TurnLease:
        """Reserve the session for a new turn; raises `TurnInProgress` with the running turn's id."""
        return self.live.turns.claim(session_id, kind, self.live.bus.position())

    def start(self, lease: TurnLease, work: TurnWork) -> TurnLease:
        lease.started = True
        self._executor.submit(self.telemetry.carry(self._run), lease, work)  # in the request's trace
        return lease

    def _run(self, lease: TurnLease, work: TurnWork) -> None:
        with self.telemetry.turn(lease.kind, lease.session_id, lease.turn_id) as observed:
            observed.outcome = self._run_observed(lease, work)

    def _mark_failed(self, failure: TurnFailure) -> None:
        """Keep the failure on its user message (`meta.turn_error`), so a reload still shows the
        error with Retry (SPEC 17). A database that refuses this write too leaves no mark: the
        UI then reads a branch that ends on a user message as unanswered, as after `turn_lost`."""
        if failure.user_message_id is None:
            return
        try:
            error = {"code": failure.code, "message": failure.message}
            set_turn_error(self.database.thread_connection(), failure.user_message_id, error)
        except Exception:
            log.warning("could not mark message %s as failed", failure.user_message_id, exc_info=True)

    def _run_observed(self, lease: TurnLease, work: TurnWork) -> str:
        """Run the turn; its outcome for the metrics: `done`, `stopped` or the failure's code."""
        bus, session_id = self.live.bus, lease.session_id

        def emit(name: str, data: dict[str, Any]) -> None:  # the terminal event, below, is published after these
            bus.post(session_id, name, {"turn_id": lease.turn_id, **data})

        outcome: TurnOutcome
        try:
            payload = work(self.database.thread_connection(), emit, lease.token)
            outcome = TurnDone({"turn_id": lease.turn_id, **payload})
        except Exception as error:  # every failure ends the turn with a terminal event
            outcome = failure_of(error, lease)
            self._mark_failed(outcome)
        finally:
            self.database.release_thread_connection()  # PostgreSQL: back to the pool
        if isinstance(outcome, TurnDone):
            name, data = "done", outcome.answer
        else:
            name, data = "error", self.failure_event(outcome)
        self.live.turns.finish(lease, lambda: bus.publish(session_id, name, data), outcome)
        if isinstance(outcome, TurnFailure):
            return outcome.code
        return "stopped" if outcome.answer.get("stopped") else "done"
