"""Two real server processes on one SQLite file and one Redis behave as one (SPEC 13), over
real HTTP to each process's own port (no proxy in between: tests/live/test_multiprocess.py adds
nginx in front).

A stream opened on B follows a turn that runs on A (and a reconnect to A with an id B had
sent replays what came after it); a cancel sent to B stops the turn on A;
a second turn sent to B while A runs one in the same session answers 409 `turn_in_progress`.
The model is a loopback fake (`testing/fake_llm.py`) that the tests hold (`released`) so
that nothing races a clock.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from testing.fake_llm import FakeLLMServer, StreamReply
from testing.waiting import HUNG_S, wait_until
from tests.multiprocess_support import ServerProcess, server_processes
from tests.redis_support import RedisServer

pytestmark = pytest.mark.slow

READ_S = 30  # only stops a hung test


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(default_reply="plain answer") as server:
        yield server


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer, llm: FakeLLMServer
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    redis_server.flush()
    folder = tmp_path_factory.mktemp("pair")
    with server_processes(
        folder,
        2,
        REDIS_URL=redis_server.url,
        LLM_PROVIDER="openai",
        LLM_BASE_URL=llm.openai_base_url,
        LLM_MODEL="m",
        SSE_HEARTBEAT_S="1",
        RATE_LIMITS="turns=off,sessions=off",
    ) as (a, b):
        yield a, b


@pytest.fixture(autouse=True)
def model_released(llm: FakeLLMServer) -> Iterator[None]:
    """A test that holds the model lets it go at its end, whatever happened."""
    yield
    llm.released.set()


def frames(response: requests.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, data) of each SSE frame; the frame's id is in data["_id"]."""
    name, ident = None, 0
    for line in response.iter_lines(chunk_size=None, decode_unicode=True):
        if line.startswith("id: "):
            ident = int(line[4:])
        elif line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and name:
            yield name, {**json.loads(line[6:]), "_id": ident}
            name = None


def until_end(response: requests.Response) -> list[tuple[str, dict[str, Any]]]:
    seen = []
    for name, data in frames(response):
        seen.append((name, data))
        if name in ("done", "error"):
            return seen
    raise AssertionError(f"the stream ended without its end: {[name for name, _ in seen]}")


def shown(seen: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(data["text"] for name, data in seen if name == "answer.delta")


def new_session(server: ServerProcess) -> str:
    return str(requests.post(f"{server.base}/sessions", json={}, headers=server.auth, timeout=READ_S).json()["id"])


def active_turn(server: ServerProcess, session_id: str) -> dict[str, Any] | None:
    found = requests.get(f"{server.base}/sessions/{session_id}", headers=server.auth, timeout=READ_S)
    turn: dict[str, Any] | None = found.json()["active_turn"]
    return turn


def post_in_background(server: ServerProcess, session_id: str, message: str) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []
    body = {"message": message, "session_id": session_id}

    def post() -> None:
        answers.append(requests.post(f"{server.base}/chat", json=body, headers=server.auth, timeout=HUNG_S))

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread, answers


def open_stream(server: ServerProcess, session_id: str, last_event_id: int | None = None) -> requests.Response:
    headers = {**server.auth, "Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    url = f"{server.base}/sessions/{session_id}/generate/stream"
    response = requests.get(url, headers=headers, stream=True, timeout=READ_S)
    assert response.status_code == 200, response.text
    return response


def test_a_stream_on_b_follows_a_turn_running_on_a(pair, llm: FakeLLMServer):
    a, b = pair
    session_id = new_session(a)
    llm.released.clear()  # the turn waits on the model until the stream on B is open
    llm.queue(StreamReply(pieces=("Hello ", "from ", "A.")))
    thread, answers = post_in_background(a, session_id, "hi")
    running = wait_active(b, session_id)
    stream = open_stream(b, session_id)
    llm.released.set()
    seen = until_end(stream)
    thread.join(HUNG_S)
    assert seen[0][0] == "turn.started" and seen[-1][0] == "done"
    assert {data["turn_id"] for _, data in seen} == {running["turn_id"]}
    assert shown(seen) == "Hello from A." == seen[-1][1]["reply"] == answers[0].json()["reply"]
    ids = [data["_id"] for _, data in seen]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    replay = until_end(open_stream(a, session_id, last_event_id=seen[0][1]["_id"]))  # the tab reconnects to A
    assert [data["_id"] for _, data in replay][-1] == ids[-1] and all(data["_id"] > ids[0] for _, data in replay)
    assert shown(replay) == "Hello from A." and replay[-1][0] == "done"


def test_a_cancel_sent_to_b_stops_the_turn_on_a(pair, llm: FakeLLMServer):
    a, b = pair
    session_id = new_session(a)
    llm.queue(StreamReply(pieces=("Shown on A. ",), hang=True))  # then writes nothing until its client hangs up
    response = requests.post(
        f"{a.base}/chat",
        json={"message": "go", "session_id": session_id},
        headers={**a.auth, "Accept": "text/event-stream"},
        stream=True,
        timeout=READ_S,
    )
    events = frames(response)
    for name, data in events:
        if name == "answer.delta":
            turn_id = data["turn_id"]
            break
    stop = requests.post(f"{b.base}/sessions/{session_id}/cancel", json={}, headers=b.auth, timeout=READ_S)
    assert stop.status_code == 200 and stop.json() == {"turn_id": turn_id, "cancelled": True}
    rest = [(name, data) for name, data in events]
    assert rest[-1][0] == "done" and rest[-1][1]["stopped"] is True and rest[-1][1]["turn_id"] == turn_id
    assert rest[-1][1]["messages"][-1]["content"] == "Shown on A. "
    assert llm.answer(-1).client_hung_up  # A closed the model's stream: the turn really stopped there
    assert active_turn(b, session_id) is None


def test_a_second_turn_sent_to_b_while_a_runs_one_is_409(pair, llm: FakeLLMServer):
    a, b = pair
    session_id = new_session(a)
    llm.released.clear()
    llm.queue("first answer")
    thread, answers = post_in_background(a, session_id, "first")
    running = wait_active(b, session_id)
    busy = requests.post(
        f"{b.base}/chat", json={"message": "second", "session_id": session_id}, headers=b.auth, timeout=READ_S
    )
    assert busy.status_code == 409, busy.text
    assert busy.json()["error"]["code"] == "turn_in_progress" and busy.json()["turn_id"] == running["turn_id"]
    llm.released.set()
    thread.join(HUNG_S)
    assert answers[0].status_code == 200 and answers[0].json()["reply"] == "first answer"
    llm.queue("second answer")  # the session is free on every process as soon as the first ended
    again = requests.post(
        f"{b.base}/chat", json={"message": "second", "session_id": session_id}, headers=b.auth, timeout=READ_S
    )
    assert again.status_code == 200 and again.json()["reply"] == "second answer"


def wait_active(server: ServerProcess, session_id: str) -> dict[str, Any]:
    wait_until(lambda: active_turn(server, session_id) is not None, "the turn never showed on the other process")
    turn = active_turn(server, session_id)
    assert turn is not None
    return turn
