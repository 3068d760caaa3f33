"""A turn whose process dies (`kill -9`) on PostgreSQL/SQLite + Redis (SPEC 7, 13; issue 24.1).

Real server processes (`python app.py`) on one database and one private Redis, a loopback
model the tests hold (`released`) so that the turn is running when its process is killed.

- A stream that follows the lost turn (`?turn_id=`, opened before or after the kill) receives
  only that turn's events and ends with its `error` (`turn_lost`), never an event of the turn
  that claims the session next: the claim ends the lost turn in the same atomic step.
- A server restarted on its port ends the turns its previous run left at once: the session
  is free without waiting for the lease (60 s here, which the test never waits).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testing.fake_llm import FakeLLMServer
from testing.waiting import wait_until
from tests.live_client import READ_S, Background, Frame, Stream, chat, new_session, wait_active
from tests.multiprocess_support import ServerProcess, server_env, start_server
from tests.process_support import free_port, stop_process

pytestmark = pytest.mark.slow

SHORT_LEASE_S = 2  # the process a test kills: its claim expires soon after
LONG_LEASE_S = 60  # a claim no test waits out


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(default_reply="plain answer") as server:
        yield server


@pytest.fixture(autouse=True)
def fresh_llm(llm: FakeLLMServer) -> Iterator[None]:
    llm.reset(default_reply="plain answer")
    yield
    llm.released.set()  # a failed test must not leave the model held


@pytest.fixture
def env(tmp_path: Path, redis_url: str, llm: FakeLLMServer) -> dict[str, str]:
    return server_env(
        tmp_path,
        REDIS_URL=redis_url,
        LLM_PROVIDER="openai",
        LLM_BASE_URL=llm.openai_base_url,
        LLM_MODEL="m",
        SSE_HEARTBEAT_S="1",
        RATE_LIMITS="turns=off,sessions=off",
    )


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Every server a test starts, stopped at its end."""
    servers: list[ServerProcess] = []
    yield servers
    for server in servers:
        if server.process.poll() is None:
            stop_process(server.process, server.log)
        else:
            server.log.close()


def start(tmp_path: Path, started: list[ServerProcess], name: str, env: dict[str, str], port: int = 0) -> ServerProcess:
    server = start_server(tmp_path, name, env, port or free_port())
    started.append(server)
    return server


def kill_9(server: ServerProcess) -> None:
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout=READ_S)


def follow(server: ServerProcess, session_id: str, turn_id: str) -> Stream:
    url = f"{server.base}/sessions/{session_id}/generate/stream?turn_id={turn_id}"
    headers = {**server.auth, "Accept": "text/event-stream"}
    return Stream(requests.get(url, headers=headers, stream=True, timeout=READ_S))


def turn_running_on(server: ServerProcess, observer: ServerProcess, llm: FakeLLMServer) -> tuple[str, str]:
    """A session whose turn runs on `server`, waiting on the model: (session id, turn id)."""
    session_id = new_session(observer.base, observer.auth)
    llm.released.clear()
    Background(server.base, server.auth, session_id, "lost")
    return session_id, str(wait_active(observer.base, observer.auth, session_id)["turn_id"])


def only_its_end(frames: list[Frame], turn_id: str) -> None:
    assert {frame.data.get("turn_id") for frame in frames} == {turn_id}, [(f.name, f.data) for f in frames]
    assert [frame.name for frame in frames if frame.name in ("done", "error")] == ["error"]
    assert frames[-1].data["error"]["code"] == "turn_lost" and frames[-1].data["status"] == 503


def test_a_stream_following_a_lost_turn_ends_with_its_error_and_never_shows_the_next_turn(
    tmp_path: Path, env: dict[str, str], started: list[ServerProcess], llm: FakeLLMServer
) -> None:
    survivor = start(tmp_path, started, "survivor", {**env, "REDIS_TURN_LEASE_S": str(LONG_LEASE_S)})
    doomed = start(tmp_path, started, "doomed", {**env, "REDIS_TURN_LEASE_S": str(SHORT_LEASE_S)})
    session_id, lost = turn_running_on(doomed, survivor, llm)
    before = follow(survivor, session_id, lost)
    before.until("turn.started")
    kill_9(doomed)
    after = follow(survivor, session_id, lost)  # a tab reloaded after the crash follows the turn it knew

    llm.released.set()
    llm.queue("the next answer")
    answers: list[requests.Response] = []

    def next_turn_answered() -> bool:  # 409 until the lost turn's claim expires; then the next turn runs
        answer = chat(survivor.base, survivor.auth, session_id, "next")
        assert answer.status_code in (200, 409), answer.text
        answers.append(answer)
        return answer.status_code == 200

    wait_until(next_turn_answered, "the lost turn's session was never claimed again")
    assert answers[-1].json()["reply"] == "the next answer"
    next_turn = answers[-1].json()["turn_id"]
    assert next_turn != lost

    only_its_end(before.until("done", "error"), lost)
    only_its_end(after.until("done", "error"), lost)
    with pytest.raises(StopIteration):  # each stream ended there
        next(before._frames)
    replay = follow(survivor, session_id, next_turn).until("done", "error")  # and the next turn's follower
    assert {frame.data["turn_id"] for frame in replay} == {next_turn} and replay[-1].name == "done"


def test_a_restarted_server_frees_its_dead_turns_sessions_without_waiting_for_the_lease(
    tmp_path: Path, env: dict[str, str], started: list[ServerProcess], llm: FakeLLMServer
) -> None:
    env = {**env, "REDIS_TURN_LEASE_S": str(LONG_LEASE_S)}
    other = start(tmp_path, started, "other", env)
    first_run = start(tmp_path, started, "first-run", env)
    session_id, lost = turn_running_on(first_run, other, llm)
    stream = follow(other, session_id, lost)
    stream.until("turn.started")
    kill_9(first_run)
    busy = chat(other.base, other.auth, session_id, "too soon")
    assert busy.status_code == 409 and busy.json()["turn_id"] == lost  # its lease (60 s) still holds

    start(tmp_path, started, "second-run", env, port=first_run.port)  # the same server, restarted
    only_its_end(stream.until("done", "error"), lost)
    llm.released.set()
    again = chat(other.base, other.auth, session_id, "again")
    assert again.status_code == 200, again.text
    assert again.json()["reply"] == "plain answer"
