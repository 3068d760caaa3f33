"""Which evidence says whether a provider can answer: its probe or a turn's last call (`llm/last_call.py`)."""

from __future__ import annotations

import pytest

from llm.last_call import FAILURE_TRUSTED_S, LastCall
from providers import Completion, FailureKind


def call(failure: FailureKind | None, status_code: int | None = None) -> Completion:
    return Completion(
        text=None if failure else "hi",
        provider="p",
        model="m",
        failure=failure,
        status_code=status_code,
        elapsed_ms=1.0,
        detail="boom" if failure else "",
    )


def recorded(completion: Completion) -> tuple[LastCall, float]:
    last = LastCall()
    last.record(completion)
    assert last.last is not None
    return last, last.last.at


def test_without_a_call_the_probe_decides() -> None:
    assert LastCall().verdict(0.0, True) is True and LastCall().verdict(0.0, False) is False


def test_a_failed_turn_outranks_an_older_probe_and_an_answer_ends_it() -> None:
    last, at = recorded(call(FailureKind.SERVER_ERROR, 500))
    assert last.verdict(at - 1, True) is False  # the banner comes with the failed turn
    last.record(call(None))
    assert last.verdict(at - 1, False) is True  # and goes with the next answer
    assert last.last_failure is not None and last.last_failure.to_dict()["failure"] == "server_error"


@pytest.mark.parametrize(("failure", "status"), [(FailureKind.TIMEOUT, None), (FailureKind.SERVER_ERROR, 500)])
def test_a_model_list_after_a_hang_or_a_500_does_not_clear_it_at_once(failure: FailureKind, status: int | None) -> None:
    last, at = recorded(call(failure, status))
    assert last.verdict(at + 1, True) is False  # a probe lists the models; the chat still hangs
    assert last.verdict(at + 1, False) is False


def test_a_failure_the_probe_can_see_end_is_over_with_the_next_good_probe() -> None:
    last, at = recorded(call(FailureKind.CONNECTION))  # refused: the probe could not connect either
    assert last.verdict(at + 1, True) is True


def test_an_old_failure_leaves_the_word_to_the_probe() -> None:
    now = [1000.0]
    last = LastCall(lambda: now[0])
    last.record(call(FailureKind.TIMEOUT))
    assert last.verdict(1001.0, True) is False
    now[0] += FAILURE_TRUSTED_S
    assert last.verdict(1001.0, True) is True


def test_a_cancel_says_nothing_of_the_server() -> None:
    last = LastCall()
    last.record(call(FailureKind.CANCELLED))
    assert last.last is None
