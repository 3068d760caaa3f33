"""Faults of an HTTP MCP server cost one fast, honest failure (SPEC 14), against the SDK's server
behind a fault-injecting wrapper (tests/mcp_fault_support.py): while the server is known down a
call fails at once with "unavailable (reconnecting in N s)"; a call cuts a long back-off short
with one try of its own; a session the server expired is made again once and the call retried
once; an answer that comes after the deadline is dropped unread. Assertions are on behaviour and
counters; the only clocks are the guards of `wait_until`."""

from __future__ import annotations

import re
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from api.services import services_of
from mcp_client import connection, outage
from mcp_client.hub import McpHub
from testing.waiting import wait_until
from tests.conftest import new_token
from tests.mcp_client_support import write_servers
from tests.mcp_fault_support import LATE_TOTAL, FaultServer

UNAVAILABLE = re.compile(r"the MCP server faults is unavailable \(reconnecting in (\d+) s\)")


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer() as running:
        yield running


def app_for(make_app: Any, tmp_path: Path, server: FaultServer, timeout_s: float = 30) -> Flask:
    servers = write_servers(tmp_path, {"faults": {"url": server.url, "trusted": True, "timeout_s": timeout_s}})
    app: Flask = make_app(mcp_servers=servers, tool_approval="none")
    wait_until(lambda: hub_of(app).status()["faults"]["connected"], "the fault server connected")
    return app


def hub_of(app: Flask) -> McpHub:
    hub = services_of(app).mcp
    assert hub is not None
    return hub


def auth_of(app: Flask) -> dict[str, str]:
    if "fault_token" not in app.config:
        app.config["fault_token"] = new_token(app, "fault-user")
    return {"Authorization": f"Bearer {app.config['fault_token']}"}


def echo(app: Flask, text: str = "hi") -> Any:
    return app.test_client().post("/tools/faults_echo", json={"text": text}, headers=auth_of(app))


def known_down(app: Flask, server: FaultServer) -> dict[str, Any]:
    """Stop the server; one call finds out; then the connection is in its back-off."""
    server.stop()
    assert echo(app).status_code in (502, 504)  # the call that finds the server gone
    wait_until(lambda: hub_of(app).status()["faults"]["retry_in_s"] is not None, "the back-off")
    return hub_of(app).status()["faults"]


def test_a_call_while_the_server_is_known_down_fails_at_once(
    make_app: Any, tmp_path: Path, server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "MIN_BACKOFF_S", 120.0)  # no scheduled try during the test
    monkeypatch.setattr(connection, "MAX_BACKOFF_S", 120.0)
    monkeypatch.setattr(outage, "PROMPT_AFTER_S", 3600.0)  # and no early one
    app = app_for(make_app, tmp_path, server)
    before = known_down(app, server)
    for _ in range(3):
        answer = echo(app)
        assert answer.status_code == 502
        error = answer.get_json()["error"]
        assert error["code"] == "UPSTREAM_ERROR" and "TIMEOUT" not in error["message"]
        found = UNAVAILABLE.search(error["message"])
        assert found is not None, error["message"]
        assert 1 <= int(found.group(1)) <= 120
    after = hub_of(app).status()["faults"]
    assert after["refused_calls"] - before["refused_calls"] == 3
    assert after["starts"] == before["starts"] and after["prompted_tries"] == 0  # no try was made for them


def test_a_call_cuts_a_long_back_off_short_with_one_try(
    make_app: Any, tmp_path: Path, server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "MIN_BACKOFF_S", 600.0)  # the scheduled try never comes in the test
    monkeypatch.setattr(connection, "MAX_BACKOFF_S", 600.0)
    monkeypatch.setattr(outage, "PROMPT_AFTER_S", 0.0)  # any call may try once
    app = app_for(make_app, tmp_path, server)
    down = known_down(app, server)
    assert down["retry_in_s"] > 60
    refused = echo(app)  # one try, refused: the answer says so at once
    assert refused.status_code == 502 and UNAVAILABLE.search(refused.get_json()["error"]["message"])
    tried = hub_of(app).status()["faults"]
    assert tried["starts"] == down["starts"] + 1 and tried["prompted_tries"] == down["prompted_tries"] + 1
    server.start()
    back = echo(app, "back")  # the server is back: this call's own try reaches it
    assert back.status_code == 200 and back.get_json()["text"] == "echo: back"
    status = hub_of(app).status()["faults"]
    assert status["connected"] and status["starts"] == tried["starts"] + 1
    assert status["prompted_tries"] == tried["prompted_tries"] + 1


def test_an_expired_session_is_made_again_once_and_the_call_retried_once(
    make_app: Any, tmp_path: Path, server: FaultServer
) -> None:
    app = app_for(make_app, tmp_path, server)
    assert echo(app, "first").status_code == 200
    assert server.seen.initializes == 1 and hub_of(app).status()["faults"]["protocol"] == "2025-11-25"
    server.expire()
    again = echo(app, "again")
    assert again.status_code == 200 and again.get_json()["text"] == "echo: again"
    assert server.seen.expired_hits >= 1 and server.seen.initializes == 2  # re-initialised once
    assert server.seen.calls == ["echo", "echo"]  # the refused call never reached a tool; its retry did
    status = hub_of(app).status()["faults"]
    assert status["renewals"] == 1 and status["connected"]
    assert echo(app, "after").get_json()["text"] == "echo: after"
    assert server.seen.initializes == 2


def test_an_answer_after_the_deadline_is_dropped_unread(make_app: Any, tmp_path: Path, server: FaultServer) -> None:
    app = app_for(make_app, tmp_path, server, timeout_s=1.5)  # the answer's rest comes after 3 s
    auth = auth_of(app)
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        for round_number in range(1, 3):
            late = app.test_client().post("/tools/faults_late", json={"reason": "x"}, headers=auth)
            assert late.status_code == 504 and late.get_json()["error"]["code"] == "TIMEOUT"
            wait_until(lambda n=round_number: server.seen.late_gone == n, "the client left the late answer")
            wait_until(lambda n=round_number: hub_of(app).status()["faults"]["late_answers"] == n, "counted late")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert server.seen.late_sent < LATE_TOTAL // 2  # the client closed the answer long before its end
    assert server.seen.methods.count("notifications/cancelled") == 2  # 2025-11-25: the server is told
    assert peak - baseline < 4 * 1024 * 1024  # never read in full, nor up to the 8 MiB cap
    assert echo(app, "still").get_json()["text"] == "echo: still"  # the session goes on
