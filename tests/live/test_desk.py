"""`live/desk.py`: a claim is given back on any way out of its block unless its turn started; a
turn runs on a fair worker and ends with one terminal event and a neutral outcome (`TurnDone` or
`TurnFailure` with a code); a turn past `MAX_TURN_S` ends as a Stop. No Flask here: what these
outcomes answer over HTTP (statuses, error JSON, SSE) is tested through the app in tests/api,
tests/live and tests/hostile."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundation.cancellation import CancelToken
from foundation.events import EventName
from live import Live
from live.bus import Event, EventBus
from live.desk import TurnDesk, TurnLimits, TurnWork
from live.turns import TurnDone, TurnFailure, TurnInProgress, TurnOutcome, TurnRegistry
from pipeline.results import TIME_LIMIT, StorageUnavailable, TurnCrashed
from storage.db import Database
from testing.waiting import HUNG_S

ROOT = Path(__file__).resolve().parents[2]


def failure_event(failure: TurnFailure) -> dict[str, Any]:
    """Stands in for the HTTP layer's rendering of a failure (`api.turns.error_event`)."""
    return {"turn_id": failure.turn_id, "code": failure.code, "user_message_id": failure.user_message_id}


def make_desk(tmp_path: Path, limits: TurnLimits) -> TurnDesk:
    return TurnDesk(Database(tmp_path / "t.db"), Live(bus=EventBus(), turns=TurnRegistry()), limits, failure_event)


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[TurnDesk]:
    desk = make_desk(tmp_path, TurnLimits(workers=1, share=1, max_turn_s=600))
    yield desk
    desk.close()
    desk.database.close()


def run(runner: TurnDesk, work: TurnWork, session_id: str = "s", user_id: int = 1) -> tuple[TurnOutcome, list[Event]]:
    with runner.claim(session_id, user_id=user_id) as claim:
        lease = claim.start(work)
    outcome = lease.outcome.result(HUNG_S)
    return outcome, runner.live.bus.read(session_id, lease.start_cursor).events


def test_an_answer_is_published_as_done_after_the_turns_events(runner: TurnDesk) -> None:
    def work(conn: Any, emit: Any, cancel: Any) -> dict[str, Any]:
        emit("command.detected", {"name": "search"})
        return {"reply": "hi"}

    outcome, events = run(runner, work)
    assert isinstance(outcome, TurnDone) and outcome.answer["reply"] == "hi"
    assert [event.name for event in events] == ["command.detected", "done"]
    assert events[-1].data == outcome.answer and {event.data["turn_id"] for event in events} == {
        outcome.answer["turn_id"]
    }
    assert runner.live.turns.active("s") is None  # the session is free for the next turn


@pytest.mark.parametrize(
    ("error", "code", "user_message_id"),
    [
        (StorageUnavailable("the database refused a write", 7), "storage_unavailable", 7),
        (TurnCrashed("the turn failed: KeyError", 3), "internal_error", 3),
        (RuntimeError("a bug before anything was stored"), "internal_error", None),
    ],
)
def test_a_failure_is_a_coded_outcome_and_one_error_event(
    runner: TurnDesk, error: Exception, code: str, user_message_id: int | None
) -> None:
    def work(conn: Any, emit: Any, cancel: Any) -> dict[str, Any]:
        raise error

    outcome, events = run(runner, work)
    assert isinstance(outcome, TurnFailure) and (outcome.code, outcome.user_message_id) == (code, user_message_id)
    assert outcome.session_id == "s" and outcome.message
    assert [event.name for event in events] == ["error"] and events[0].data == failure_event(outcome)


def test_a_bug_is_logged_with_its_traceback(runner: TurnDesk, caplog: pytest.LogCaptureFixture) -> None:
    def work(conn: Any, emit: Any, cancel: Any) -> dict[str, Any]:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="turns"):
        run(runner, work)
    assert any(record.exc_info and "boom" in str(record.exc_info[1]) for record in caplog.records)


def test_a_busy_session_raises_turn_in_progress_with_the_running_turn(runner: TurnDesk) -> None:
    with runner.claim("s", user_id=1) as running:
        with pytest.raises(TurnInProgress) as busy, runner.claim("s", user_id=1):
            pass
        assert busy.value.turn_id == running.turn_id


@pytest.mark.parametrize("fault", [OSError("No space left on device"), ValueError("a bad retry"), KeyboardInterrupt])
def test_a_claim_is_given_back_on_any_way_out_of_its_block(runner: TurnDesk, fault: BaseException | type) -> None:
    with pytest.raises(BaseException), runner.claim("s", user_id=1):  # noqa: B017 - any fault at all
        raise fault  # type: ignore[misc]
    assert runner.live.turns.active("s") is None
    outcome, _ = run(runner, lambda conn, emit, cancel: {"reply": "next"})  # the next turn answers at once
    assert isinstance(outcome, TurnDone)


def test_a_started_turn_keeps_its_claim_after_its_block(runner: TurnDesk) -> None:
    release = CancelToken()

    def work(conn: Any, emit: Any, cancel: CancelToken) -> dict[str, Any]:
        release.wait(HUNG_S)
        return {"reply": "late"}

    with runner.claim("s", user_id=1) as claim:
        lease = claim.start(work)
    assert runner.live.turns.active("s") is lease  # only the turn's end frees the session
    release.cancel()
    assert isinstance(lease.outcome.result(HUNG_S), TurnDone) and runner.live.turns.active("s") is None


def test_a_turn_past_its_time_limit_ends_as_a_stop(tmp_path: Path) -> None:
    desk = make_desk(tmp_path, TurnLimits(workers=1, share=1, max_turn_s=0.2))

    def endless(conn: Any, emit: Any, cancel: CancelToken) -> dict[str, Any]:
        cancel.wait(HUNG_S)  # an answer that never ends, until its token fires
        return {"reply": "", "stopped": cancel.cancelled, "why": cancel.reason}

    try:
        outcome, _ = run(desk, endless)
    finally:
        desk.close()
    assert isinstance(outcome, TurnDone) and outcome.answer["stopped"] and outcome.answer["why"] == TIME_LIMIT


def test_one_user_never_holds_more_than_a_share_while_another_waits(tmp_path: Path) -> None:
    desk = make_desk(tmp_path, TurnLimits(workers=2, share=1, max_turn_s=600))
    gates = {name: CancelToken() for name in ("a1", "a2", "b1")}
    order: list[str] = []

    def held(name: str) -> TurnWork:
        def work(conn: Any, emit: Any, cancel: CancelToken) -> dict[str, Any]:
            order.append(name)
            gates[name].wait(HUNG_S)
            return {"reply": name}

        return work

    try:
        leases = {}
        for name, user in (("a1", 1), ("a2", 1), ("b1", 2)):  # user 1 asks twice before user 2 asks once
            with desk.claim(name, user_id=user) as claim:
                leases[name] = claim.start(held(name))
        assert leases["b1"].outcome.done() is False
        deadline = HUNG_S
        while len(order) < 2 and deadline > 0:
            gates["a1"].wait(0.01)
            deadline -= 0.01
        assert sorted(order) == ["a1", "b1"]  # a2 waits for user 1's share; user 2's turn took the free worker
        queued = [event.name for event in desk.live.bus.read("a2", 0).events]
        assert queued == [EventName.TURN_QUEUED] and desk.workers.waiting() == 1
        gates["a1"].cancel()  # user 1's first turn ends: their next one starts
        assert isinstance(leases["a1"].outcome.result(HUNG_S), TurnDone)
        gates["a2"].cancel()
        gates["b1"].cancel()
        assert all(isinstance(lease.outcome.result(HUNG_S), TurnDone) for lease in leases.values())
        assert order[2] == "a2"
    finally:
        desk.close()


def test_the_desk_imports_no_http() -> None:
    """live/ sits below the HTTP layer: importing the desk loads neither api/ nor flask."""
    code = (
        "import sys, live.desk; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'api', 'app', 'flask', 'werkzeug'}))"
    )
    found = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]", found.stdout
