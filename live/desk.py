"""Where every turn starts: claim the session, hand the work to a fair worker, end it once.

`POST /chat`, a regenerate, a widget's or an approval's answer, `POST /v1/chat/completions`
and `POST /activities/generate` all go through `TurnDesk.claim`, a context manager:

    with desk.claim(session_id, user_id=user.id) as claim:
        ...checks that may still refuse (404, 409, a bad image)...
        claim.start(work)

The claim (one turn at a time per session: `TurnInProgress` while one runs) is given back on
ANY way out of the block, an exception included, unless `start` handed the turn to a worker:
from then on only the turn's own end releases the session. No view claims or gives back by hand.

`start` queues the work on `FairWorkers` (no user holds more than `TURN_SHARE` of
`TURN_WORKERS` while another waits) and arms the turn's time limit (`MAX_TURN_S`, counted from
when it starts to run): at the limit its cancel token fires with `TIME_LIMIT`, and the turn ends
as a Stop does, keeping the answer text already shown (`meta.stop_reason` `time_limit`).

Whatever happens, the turn ends with exactly one terminal event and one `TurnOutcome` on its
lease: `done` with the answer (`TurnDone`), or `error` (`TurnFailure`, `failure_of`): the
provider chain did not answer (`provider_unavailable`, in the user's words, with a `reason`;
what an operator needs goes to the log), the database refused a write
(`storage_unavailable`), or anything else (`internal_error`). The `error` event's data is the
HTTP layer's rendering of the failure (`failure_event`, given where the app is built), so a
stream and a JSON answer of the same turn say the same thing.

This module imports nothing of the HTTP layer: its outcomes are values the HTTP layer maps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from foundation.cancellation import CancelToken, Watchdog
from foundation.events import EventName
from live import Live
from live.turn_workers import FairWorkers
from live.turns import FailureCode, TurnDone, TurnFailure, TurnLease, TurnOutcome
from observe.telemetry import Telemetry
from pipeline.results import TIME_LIMIT, EventSink, ProviderUnavailable, StorageUnavailable, TurnFailed
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
    details: dict[str, Any] | None = None
    if isinstance(error, ProviderUnavailable):  # the user's words here, the operator's in the log
        code, message, details = "provider_unavailable", error.public_message, {"reason": error.reason}
        log.warning("turn failed in session %s: no provider answered: %s", lease.session_id, error.operator_message)
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
        details=details,
    )


@dataclass(frozen=True)
class TurnLimits:
    """How many turns run at once, each user's share of them, and a turn's total time."""

    workers: int
    share: int
    max_turn_s: float


class Claim:
    """A session claimed for one turn, inside `TurnDesk.claim`'s block."""

    def __init__(self, desk: TurnDesk, lease: TurnLease, user_id: int | None) -> None:
        self.desk = desk
        self.lease = lease
        self.user_id = user_id

    @property
    def turn_id(self) -> str:
        return self.lease.turn_id

    def start(self, work: TurnWork) -> TurnLease:
        """Hand the turn to a worker: from now on only its end releases the session."""
        return self.desk.start(self, work)


class TurnDesk:
    """Claims sessions and runs their turns on fair workers; one instance per app."""

    def __init__(
        self,
        database: Store,
        live: Live,
        limits: TurnLimits,
        failure_event: FailureEvent,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.database = database
        self.telemetry = telemetry or Telemetry.off()
        self.live = live
        self.limits = limits
        self.failure_event = failure_event
        self.workers = FairWorkers(limits.workers, limits.share)
        self._timers = Watchdog("turn-time-limits")

    @contextmanager
    def claim(self, session_id: str, *, user_id: int | None, kind: str = "chat") -> Iterator[Claim]:
        """The session for a new turn (raises `TurnInProgress` with the running turn's id);
        given back when the block ends unless the turn was started in it."""
        lease = self.live.turns.claim(session_id, kind, self.live.bus.position())
        try:
            yield Claim(self, lease, user_id)
        finally:
            if not lease.started:
                self.live.turns.abandon(lease)

    def close(self) -> None:
        self.workers.shutdown()

    def start(self, claim: Claim, work: TurnWork) -> TurnLease:
        lease = claim.lease
        lease.started = True
        run = self.telemetry.carry(self._run)  # in the request's trace
        if not self.workers.submit(claim.user_id, lambda: run(lease, work), lease.token):
            self.live.bus.post(lease.session_id, EventName.TURN_QUEUED, {"turn_id": lease.turn_id})
        return lease

    def _run(self, lease: TurnLease, work: TurnWork) -> None:
        def at_the_limit() -> None:
            lease.token.cancel(TIME_LIMIT)

        unarm = self._timers.schedule(self.limits.max_turn_s, at_the_limit)
        try:
            with self.telemetry.turn(lease.kind, lease.session_id, lease.turn_id) as observed:
                observed.outcome = self._run_observed(lease, work)
        finally:
            unarm()

    def _mark_failed(self, failure: TurnFailure) -> None:
        """Keep the failure on its user message (`meta.turn_error`), so a reload still shows the
        error with Retry (SPEC 17). A database that refuses this write too leaves no mark: the
        UI then reads a branch that ends on a user message as unanswered, as after `turn_lost`."""
        if failure.user_message_id is None:
            return
        try:
            error: dict[str, Any] = {"code": failure.code, "message": failure.message}
            if failure.details:
                error["details"] = failure.details
            set_turn_error(self.database.thread_connection(), failure.user_message_id, error)
        except Exception:
            log.warning("could not mark message %s as failed", failure.user_message_id, exc_info=True)

    def _run_observed(self, lease: TurnLease, work: TurnWork) -> str:
        """Run the turn; its outcome for the metrics: `done`, `stopped` or the failure's code."""
        bus, session_id = self.live.bus, lease.session_id

        def emit(name: EventName, data: dict[str, Any]) -> None:  # the terminal event, below, is published after these
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
            name, data = EventName.DONE, outcome.answer
        else:
            name, data = EventName.ERROR, self.failure_event(outcome)
        self.live.turns.finish(lease, lambda: bus.publish(session_id, name, data), outcome)
        if isinstance(outcome, TurnFailure):
            return outcome.code
        return "stopped" if outcome.answer.get("stopped") else "done"
