"""Both protocol eras (SPEC 14): our client sends `server/discover` (2026-07-28) and falls back to
`initialize` (2025-11-25), against SDK servers that speak only one era each
(tests/fixtures/mcp_one_era.py), as stdio children and over streamable HTTP in a subprocess. A
tool call works against each; the era agreed shows in the hub's status and is the one the
server saw the call at."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from api.services import services_of
from testing.waiting import wait_until
from tests.async_support import run_async
from tests.conftest import new_token
from tests.mcp_client_support import write_servers
from tests.process_support import free_port, stop_process

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_one_era.py"
MODERN, LEGACY = "2026-07-28", "2025-11-25"


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def http_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """`http://…/mcp` of a one-era server (the era is the test's parameter) in a subprocess."""
    era: str = request.param
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SERVER), era, "http", str(port)])
    try:
        wait_until(lambda: accepts(port) or process.poll() is not None, "the one-era server listens")
        assert process.poll() is None, "the one-era server exited"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(process)


def leaves(error: BaseException) -> list[BaseException]:
    """The innermost errors of nested exception groups (anyio's task groups nest them)."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def entry(era: str, transport: str, url: str | None) -> dict[str, Any]:
    if transport == "stdio":
        return {"command": sys.executable, "args": [str(SERVER), era, "stdio"], "timeout_s": 10}
    return {"url": url, "trusted": True, "timeout_s": 10}


def call_both_tools(make_app: Any, tmp_path: Path, server: dict[str, Any], era: str) -> None:
    app: Flask = make_app(mcp_servers=write_servers(tmp_path, {"one": server}), tool_approval="none")
    hub = services_of(app).mcp
    assert hub is not None
    wait_until(lambda: hub.status()["one"]["connected"], "the one-era server connected")
    assert hub.status()["one"]["protocol"] == era
    auth = {"Authorization": f"Bearer {new_token(app, 'era-user')}"}
    client = app.test_client()
    echoed = client.post("/tools/one_echo", json={"text": "hi"}, headers=auth)
    assert echoed.status_code == 200 and echoed.get_json()["text"] == "echo: hi"
    seen = client.post("/tools/one_era_of_call", json={}, headers=auth)
    assert seen.status_code == 200 and seen.get_json()["text"] == era  # the server served it at that era


@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_a_call_works_over_stdio_in_either_era(make_app: Any, tmp_path: Path, era: str) -> None:
    call_both_tools(make_app, tmp_path, entry(era, "stdio", None), era)


@pytest.mark.parametrize(("http_server", "era"), [(MODERN, MODERN), (LEGACY, LEGACY)], indirect=["http_server"])
def test_a_call_works_over_http_in_either_era(make_app: Any, tmp_path: Path, http_server: str, era: str) -> None:
    call_both_tools(make_app, tmp_path, entry(era, "http", http_server), era)


@pytest.mark.parametrize(("http_server", "pinned"), [(MODERN, "legacy"), (LEGACY, MODERN)], indirect=["http_server"])
def test_each_fixture_refuses_the_other_era(http_server: str, pinned: str) -> None:
    """The servers above really speak one era: the SDK's client pinned to the other one fails."""

    refusals: list[str] = []

    async def pinned_call() -> None:
        try:
            async with Client(http_server, mode=pinned, cache=None) as client:
                await client.session.list_tools()
        except* MCPError as group:
            refusals.extend(str(error) for error in leaves(group))

    run_async(pinned_call)  # its own thread: a browser module before this one leaves a loop running
    assert len(refusals) == 1 and "Unsupported protocol version" in refusals[0]
