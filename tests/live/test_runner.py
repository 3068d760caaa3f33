"""`live/runner.py`: a turn runs on a worker and ends with one terminal event and a neutral
outcome (`TurnDone` or `TurnFailure` with a code). No Flask here: what these outcomes answer
over HTTP (statuses, error JSON, SSE) is tested through the app in tests/api and tests/live."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from live import Live
from live.bus import Event, EventBus
from live.runner import TurnRunner, TurnWork
from live.turns import TurnDone, TurnFailure, TurnInProgress, TurnOutcome, TurnRegistry
from pipeline.turn import StorageUnavailable, TurnCrashed
from storage.db import Database
from testing.waiting import HUNG_S

ROOT = Path(__file__).resolve().parents[2]


def failure_event(failure: TurnFailure) -> dict[str, Any]:
    """Stands in for the HTTP layer's rendering of a failure (`api.turns.error_event`)."""
    return {"turn_id": failure.turn_id, "code": failure.code, "user_message_id": failure.user_message_id}


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[TurnRunner]:
    database = Database(tmp_path / "t.db")
    live = Live(bus=EventBus(), turns=TurnRegistry())
    yield TurnRunner(database, live, workers=1, failure_event=failure_event)
    database.close()


def run(runner: TurnRunner, work: TurnWork) -> tuple[TurnOutcome, list[Event]]:
    lease = runner.start(runner.claim("s"), work)
    outcome = lease.outcome.result(HUNG_S)
    return outcome, runner.live.bus.read("s", lease.start_cursor).events


def test_an_answer_is_published_as_done_after_the_turns_events(runner: TurnRunner) -> None:
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
    runner: TurnRunner, error: Exception, code: str, user_message_id: int | None
) -> None:
    def work(conn: Any, emit: Any, cancel: Any) -> dict[str, Any]:
        raise error

    outcome, events = run(runner, work)
    assert isinstance(outcome, TurnFailure) and (outcome.code, outcome.user_message_id) == (code, user_message_id)
    assert outcome.session_id == "s" and outcome.message
    assert [event.name for event in events] == ["error"] and events[0].data == failure_event(outcome)


def test_a_bug_is_logged_with_its_traceback(runner: TurnRunner, caplog: pytest.LogCaptureFixture) -> None:
    def work(conn: Any, emit: Any, cancel: Any) -> dict[str, Any]:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="turns"):
        run(runner, work)
    assert any(record.exc_info and "boom" in str(record.exc_info[1]) for record in caplog.records)


def test_a_busy_session_raises_turn_in_progress_with_the_running_turn(runner: TurnRunner) -> None:
    running = runner.claim("s")
    with pytest.raises(TurnInProgress) as busy:
        runner.claim("s")
    assert busy.value.turn_id == running.turn_id


def test_the_runner_imports_no_http() -> None:
    """live/ sits below the HTTP layer: importing the runner loads neither api/ nor flask."""
    code = (
        "import sys, live.runner; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'api', 'app', 'flask', 'werkzeug'}))"
    )
    found = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]", found.stdout
