"""`MAX_STREAMS_PER_USER` holds across server processes with Redis (SPEC 12, 13; issue 24.6).

Two real server processes (`python app.py`) on one database and one private Redis, each
user's open streams counted in Redis: streams opened on A count on B, a closed one frees its
seat for B, and the seats of a process killed with its streams open (`kill -9`) are free
again within its lease (`REDIS_TURN_LEASE_S`, short for the process the test kills).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testing.waiting import wait_until
from tests.live_client import READ_S, new_session
from tests.multiprocess_support import ServerProcess, server_env, start_server
from tests.process_support import free_port, stop_process

pytestmark = pytest.mark.slow

CAP = 2


@pytest.fixture
def pair(tmp_path: Path, redis_url: str) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    env = server_env(
        tmp_path,
        REDIS_URL=redis_url,
        TRACE_ENABLED="1",  # a trace stream stays open until its client leaves
        MAX_STREAMS_PER_USER=str(CAP),
        RATE_LIMITS="sessions=off",
        LLM_PROVIDER="openai",
        LLM_BASE_URL="http://127.0.0.1:9/v1",  # no turn runs here
        LLM_MODEL="m",
    )
    servers = [start_server(tmp_path, "a", {**env, "REDIS_TURN_LEASE_S": "2"}, free_port())]
    try:
        servers.append(start_server(tmp_path, "b", {**env, "REDIS_TURN_LEASE_S": "30"}, free_port()))
        yield servers[0], servers[1]
    finally:
        for server in servers:
            stop_process(server.process, server.log)


def trace(server: ServerProcess, session_id: str) -> requests.Response:
    url = f"{server.base}/sessions/{session_id}/trace"
    return requests.get(url, headers={**server.auth, "Accept": "text/event-stream"}, stream=True, timeout=READ_S)


def refused(response: requests.Response) -> bool:
    if response.status_code == 200:
        return False
    assert response.status_code == 429, response.text
    assert response.json()["error"]["details"]["limit"] == "streams"
    return True


def test_the_open_streams_cap_holds_across_processes_and_a_killed_process_frees_its_seats(
    pair: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = pair
    session_id = new_session(a.base, a.auth)
    on_a = [trace(a, session_id) for _ in range(CAP)]
    assert [response.status_code for response in on_a] == [200] * CAP
    assert refused(trace(b, session_id))  # the user's streams on A count on B

    on_a.pop().close()  # A gives the seat back once it sees its client leave
    on_b: list[requests.Response] = []

    def opened_on_b() -> bool:
        response = trace(b, session_id)
        if refused(response):
            return False
        on_b.append(response)
        return True

    wait_until(opened_on_b, "a closed stream's seat never came free for the other process")
    assert refused(trace(b, session_id)) and refused(trace(a, session_id))  # one on A, one on B: full again

    os.kill(a.process.pid, signal.SIGKILL)  # its stream's seat is no longer renewed
    a.process.wait(timeout=READ_S)
    wait_until(opened_on_b, "a killed process's seats were never freed")
    assert refused(trace(b, session_id))  # both seats are B's now
    for response in on_a + on_b:
        response.close()
