"""bounded.worker: one job in a fresh limited child; every way it can end is a value."""

from __future__ import annotations

import threading
import time

import pytest

from bounded.worker import Done, Failure, Job, JobFailed, Limits, run
from cancellation import CancelToken

LIMITS = Limits(wall_s=5.0, memory_mb=64)


def job(name: str, frames: tuple[bytes, ...] = (), **args: object) -> Job:
    return Job(f"tests.bounded_jobs:{name}", dict(args), frames)


def test_args_and_frames_reach_the_job_and_its_value_comes_back() -> None:
    assert run(job("echo", (b"one", b"two"), n=1), LIMITS) == Done({"args": {"n": 1}, "frames": ["one", "two"]})


def test_input_is_streamed_lazily() -> None:
    produced: list[int] = []

    def frames():  # type: ignore[no-untyped-def]
        for index in range(50):
            produced.append(index)
            yield b"x" * 1_000_000

    assert run(Job("tests.bounded_jobs:count_bytes", {}, frames()), LIMITS) == Done(50_000_000)
    assert len(produced) == 50


def test_a_job_that_stops_reading_early_does_not_block_the_caller() -> None:
    frames = (b"first",) + (b"y" * 1_000_000,) * 20
    assert run(job("first_frame_only", frames), LIMITS) == Done("first")


def test_memory_past_the_budget_is_a_memory_failure() -> None:
    assert run(job("allocate", mb=16), LIMITS) == Done(16)
    failed = run(job("allocate", mb=500), LIMITS)
    assert isinstance(failed, JobFailed) and failed.kind is Failure.MEMORY


def test_a_job_past_its_wall_deadline_is_killed() -> None:
    started = time.monotonic()
    failed = run(job("sleep", seconds=30), Limits(wall_s=0.5, memory_mb=64))
    assert isinstance(failed, JobFailed) and failed.kind is Failure.TIMEOUT
    assert time.monotonic() - started < 3


def test_a_spinning_job_is_killed_at_its_deadline() -> None:
    started = time.monotonic()
    failed = run(job("spin"), Limits(wall_s=0.5, memory_mb=64))
    assert isinstance(failed, JobFailed) and failed.kind is Failure.TIMEOUT
    assert time.monotonic() - started < 3


def test_cancel_kills_the_child_at_once() -> None:
    token = CancelToken()
    threading.Timer(0.3, token.cancel).start()
    started = time.monotonic()
    failed = run(job("sleep", seconds=30), LIMITS, cancel=token)
    assert isinstance(failed, JobFailed) and failed.kind is Failure.CANCELLED
    assert time.monotonic() - started < 3


def test_an_answer_past_the_output_cap_is_refused() -> None:
    failed = run(job("big_answer", chars=200_000), Limits(wall_s=5, memory_mb=64, output_bytes=100_000))
    assert isinstance(failed, JobFailed) and failed.kind is Failure.TOO_LARGE


def test_an_exception_in_the_job_is_a_crash_with_its_message() -> None:
    failed = run(job("fail"), LIMITS)
    assert failed == JobFailed(Failure.CRASHED, "ValueError: bad input")


def test_an_unknown_function_is_a_crash() -> None:
    failed = run(Job("tests.bounded_jobs:missing"), LIMITS)
    assert isinstance(failed, JobFailed) and failed.kind is Failure.CRASHED


def test_the_child_gets_no_environment_of_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_API_KEY", "secret")
    value = run(job("environment"), LIMITS)
    assert isinstance(value, Done) and "LLM_API_KEY" not in value.value


def test_a_lone_surrogate_in_the_answer_survives() -> None:
    assert run(job("lone_surrogate"), LIMITS) == Done("a\ud800b")


def test_a_failing_input_iterator_is_raised_to_the_caller() -> None:
    def frames():  # type: ignore[no-untyped-def]
        yield b"one"
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        run(Job("tests.bounded_jobs:count_bytes", {}, frames()), LIMITS)
