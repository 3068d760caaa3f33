"""A stdio MCP server that crashes mid-call, writes garbage to stdout or floods stderr costs one
bounded failed call (or a few log lines), never the process or the next call (SPEC 14)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from api.services import services_of
from testing.waiting import wait_until
from tests.conftest import new_token
from tests.mcp_client_support import write_servers

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_stdio_faults.py"


@pytest.fixture
def faults_app(make_app: Any, tmp_path: Path) -> Flask:
    servers = write_servers(tmp_path, {"bad": {"command": sys.executable, "args": [str(SERVER)], "timeout_s": 3}})
    app: Flask = make_app(mcp_servers=servers)
    return app


def call(app: Flask, auth: dict[str, str], name: str, body: dict[str, Any]) -> Any:
    return app.test_client().post(f"/tools/{name}", json=body, headers=auth)


def test_a_crash_mid_call_is_one_failed_call_and_the_child_comes_back(faults_app: Flask) -> None:
    auth = {"Authorization": f"Bearer {new_token(faults_app)}"}
    hub = services_of(faults_app).mcp
    assert hub is not None
    crashed = call(faults_app, auth, "bad_crash", {"reason": "test"})
    assert crashed.status_code == 502 and crashed.get_json()["error"]["code"] == "UPSTREAM_ERROR"
    assert "did not finish its answer" in crashed.get_json()["error"]["message"]
    wait_until(lambda: hub.status()["bad"]["starts"] >= 2 and hub.status()["bad"]["connected"], "a restart")
    assert call(faults_app, auth, "bad_echo", {"text": "again"}).get_json()["text"] == "echo: again"


def test_garbage_on_stdout_is_a_bounded_failed_call(faults_app: Flask) -> None:
    auth = {"Authorization": f"Bearer {new_token(faults_app)}"}
    garbage = call(faults_app, auth, "bad_garbage", {"reason": "test"})
    assert garbage.status_code == 504 and garbage.get_json()["error"]["code"] == "TIMEOUT"
    assert call(faults_app, auth, "bad_echo", {"text": "still"}).get_json()["text"] == "echo: still"


def test_a_flood_on_stderr_is_logged_bounded(faults_app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    auth = {"Authorization": f"Bearer {new_token(faults_app)}"}
    with caplog.at_level(logging.INFO, logger="mcp"):
        assert call(faults_app, auth, "bad_noise", {"lines": 5000}).status_code == 200
        hub = services_of(faults_app).mcp
        assert hub is not None
        hub.close()  # the child ends: its stderr reader logs what it left out
        wait_until(lambda: any("stderr lines not logged" in r.getMessage() for r in caplog.records), "the count")
    logged = [r.getMessage() for r in caplog.records if "stderr: noise line" in r.getMessage()]
    assert 0 < len(logged) <= 60 and all(len(line) < 600 for line in logged)
