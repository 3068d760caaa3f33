"""The HTTP API of live turns as a client uses it, for tests that talk to real server processes.

`Stream` reads an event stream frame by frame (id, name, JSON data), skipping heartbeats,
and knows which process served it (nginx's `X-Upstream`). `Background` is a JSON
`POST /chat` waiting for its turn's end in a thread, so a test can act while the turn runs.
Every read has a timeout (`READ_S`) that only stops a hung test.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import requests

from testing.waiting import HUNG_S, wait_until

READ_S = 30  # a read that waits longer than this is a hung test, not a slow machine


@dataclass(frozen=True)
class Frame:
    id: int
    name: str
    data: dict[str, Any]


class Stream:
    """An open event stream: its frames in order (heartbeats left out) and which process serves it."""

    def __init__(self, response: requests.Response) -> None:
        assert response.status_code == 200, response.text
        self.response = response
        self.upstream = response.headers.get("X-Upstream")
        self._frames = self._read()

    def _read(self) -> Iterator[Frame]:
        ident, name = 0, None
        for line in self.response.iter_lines(chunk_size=None, decode_unicode=True):
            if line.startswith("id: "):
                ident = int(line[4:])
            elif line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name is not None:
                yield Frame(ident, name, json.loads(line[6:]))
                name = None

    def until(self, *names: str) -> list[Frame]:
        """The frames up to and including the first one named one of `names`, heartbeats left
        out. No such frame within `HUNG_S` (heartbeats come every `SSE_HEARTBEAT_S`, so the
        check runs) fails the test instead of hanging it, as a stream that ends without one does."""
        read: list[Frame] = []
        deadline = time.monotonic() + HUNG_S
        for frame in self._frames:
            assert time.monotonic() < deadline, f"no {names} within {HUNG_S:g} s: {[f.name for f in read]}"
            if frame.name == "heartbeat":
                continue
            read.append(frame)
            if frame.name in names:
                return read
        raise AssertionError(f"the stream ended without {names}: {[f.name for f in read]}")

    def close(self) -> None:
        self.response.close()


def open_stream(base: str, user: dict[str, str], session_id: str, last_event_id: int | None = None) -> Stream:
    headers = {**user, "Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    url = f"{base}/sessions/{session_id}/generate/stream"
    return Stream(requests.get(url, headers=headers, stream=True, timeout=READ_S))


def streamed_chat(base: str, user: dict[str, str], session_id: str, message: str) -> Stream:
    body = {"message": message, "session_id": session_id}
    headers = {**user, "Accept": "text/event-stream"}
    return Stream(requests.post(f"{base}/chat", json=body, headers=headers, stream=True, timeout=READ_S))


def chat(base: str, user: dict[str, str], session_id: str, message: str) -> requests.Response:
    body = {"message": message, "session_id": session_id}
    return requests.post(f"{base}/chat", json=body, headers=user, timeout=READ_S)


class Background:
    """A JSON `POST /chat` waiting in a thread for its turn's end (or for its process to die)."""

    def __init__(self, base: str, user: dict[str, str], session_id: str, message: str) -> None:
        self.response: requests.Response | None = None
        self.failure: Exception | None = None
        self._thread = threading.Thread(target=self._run, args=(base, user, session_id, message), daemon=True)
        self._thread.start()

    def _run(self, base: str, user: dict[str, str], session_id: str, message: str) -> None:
        try:
            self.response = requests.post(
                f"{base}/chat", json={"message": message, "session_id": session_id}, headers=user, timeout=HUNG_S
            )
        except requests.RequestException as error:
            self.failure = error

    def ended(self) -> requests.Response | Exception | None:
        """The answer, or why there is none, once the request is over."""
        self._thread.join(HUNG_S)
        return self.response if self.response is not None else self.failure

    def result(self) -> requests.Response:
        self._thread.join(HUNG_S)
        assert self.response is not None, f"the turn's request failed: {self.failure!r}"
        return self.response


def new_session(base: str, user: dict[str, str]) -> str:
    made = requests.post(f"{base}/sessions", json={}, headers=user, timeout=READ_S)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def active_turn(base: str, user: dict[str, str], session_id: str) -> dict[str, Any] | None:
    found = requests.get(f"{base}/sessions/{session_id}", headers=user, timeout=READ_S)
    assert found.status_code == 200, found.text
    turn: dict[str, Any] | None = found.json()["active_turn"]
    return turn


def wait_active(base: str, user: dict[str, str], session_id: str) -> dict[str, Any]:
    wait_until(lambda: active_turn(base, user, session_id) is not None, "the turn never started")
    turn = active_turn(base, user, session_id)
    assert turn is not None
    return turn


def shown_text(frames: list[Frame]) -> str:
    """What the user sees: the deltas after the last `answer.reset`."""
    text = ""
    for frame in frames:
        if frame.name == "answer.reset":
            text = ""
        elif frame.name == "answer.delta":
            text += frame.data["text"]
    return text


def stored_messages(base: str, user: dict[str, str], session_id: str) -> list[dict[str, Any]]:
    found = requests.get(f"{base}/sessions/{session_id}/messages", headers=user, timeout=READ_S)
    assert found.status_code == 200, found.text
    messages: list[dict[str, Any]] = found.json()["messages"]
    return messages


def cancel(base: str, user: dict[str, str], session_id: str) -> requests.Response:
    return requests.post(f"{base}/sessions/{session_id}/cancel", json={}, headers=user, timeout=READ_S)
