"""The rules of a known-down MCP server (mcp_client/outage.py): when a call may try sooner than
the back-off, when it waits for the scheduled try, and what its failure says."""

from __future__ import annotations

import pytest

from mcp_client.outage import PROMPT_AFTER_S, WAIT_FOR_TRY_S, Outage, Unavailable


@pytest.mark.parametrize(
    ("since_failure_s", "may_prompt"),
    [(0.0, False), (PROMPT_AFTER_S - 0.1, False), (PROMPT_AFTER_S, True), (25.0, True)],
)
def test_a_call_may_cut_a_back_off_short_only_a_while_after_the_last_failed_try(
    since_failure_s: float, may_prompt: bool
) -> None:
    outage = Outage(failed_at=100.0, retry_at=130.0)
    assert outage.may_prompt(100.0 + since_failure_s) is may_prompt


@pytest.mark.parametrize(
    ("retry_in_s", "budget_s", "waits"),
    [(0.2, 30.0, True), (WAIT_FOR_TRY_S, 30.0, True), (WAIT_FOR_TRY_S + 0.1, 30.0, False), (0.5, 0.3, False)],
)
def test_a_try_due_soon_within_the_call_s_time_is_waited_for(retry_in_s: float, budget_s: float, waits: bool) -> None:
    outage = Outage(failed_at=0.0, retry_at=10.0 + retry_in_s)
    assert outage.due_soon(10.0, budget_s) is waits


@pytest.mark.parametrize(
    ("retry_in_s", "shown"),
    [(0.0, "reconnecting in 1 s"), (0.2, "reconnecting in 1 s"), (11.5, "reconnecting in 12 s")],
)
def test_the_failure_says_when_the_next_try_is_due(retry_in_s: float, shown: str) -> None:
    error = Unavailable("docs", retry_in_s, "ConnectError: All connection attempts failed")
    assert str(error) == f"the MCP server docs is unavailable ({shown}): ConnectError: All connection attempts failed"
