"""Where features meet, tried as an attacker and an operator would, against the real server.

- A chat whose image a full disk refuses, or whose Retry meets a locked messages table, answers
  its next message at once (the claim on the session is given back on every way out of the view:
  `live/desk.py`), on SQLite, PostgreSQL, and PostgreSQL with Redis.
- One user's endless answers hold at most their share of the turn workers: another user's
  `hello` is answered while they run, and an endless answer ends at `MAX_TURN_S` as a Stop,
  keeping what was shown.
- A flood of wrong passwords from 40 addresses neither slows another user's token requests nor
  locks the account's owner out.

Assertions are on behaviour (statuses, events, what is stored); the latencies asserted are the
OTHER user's, with bounds far above a healthy answer and far below what the faults caused
(a turn never answered, a request waiting 10 s behind the hashing).
"""

from __future__ import annotations

import base64
import os
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from testing.attacks.seams import FLOOD_ADDRESSES, LoginFlood, owner_signs_in, timed_requests
from testing.fake_llm import FakeLLMServer, StreamReply, tiny_png
from testing.hostile import ServerUnderTest, running_server

STACKS = ("sqlite", "postgresql", "postgresql+redis")


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(default_reply="hello") as server:
        yield server


def stack_env(stack: str, request: pytest.FixtureRequest) -> dict[str, str]:
    env: dict[str, str] = {}
    if stack.startswith("postgresql"):
        env["DATABASE_URL"] = request.getfixturevalue("pg_url")
    if stack.endswith("+redis"):
        env["REDIS_URL"] = request.getfixturevalue("redis_url")
    return env


def model_env(llm: FakeLLMServer, **extra: str) -> dict[str, str]:
    return {
        "LLM_PROVIDER": "openai",
        "LLM_BASE_URL": llm.openai_base_url,
        "LLM_MODEL": "fake",
        "LLM_TIMEOUT_S": "30",
        "PROVIDER_BREAKER_FAILURES": "0",
        "RATE_LIMITS": "turns=off,sessions=off",
        **extra,
    }


def chat(server: ServerUnderTest, token: str, body: dict[str, Any], timeout: float = 60) -> requests.Response:
    return requests.post(f"{server.base}/chat", json=body, headers=server.auth(token), timeout=timeout)


def png_url() -> str:
    return "data:image/png;base64," + base64.b64encode(tiny_png()).decode()


@contextmanager
def full_disk(folder: Path) -> Iterator[str]:
    """`folder` on a tiny tmpfs filled to the last byte (a full disk), when this machine lets
    the test mount one; else a regular file where the folder should be (a folder that can't be
    written). Yields which one."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.mkdir(exist_ok=True)
    mounted = (
        shutil.which("mount") is not None
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True, check=False
        ).returncode
        == 0
    )
    try:
        if mounted:
            fill(folder / "filler")
            yield "full tmpfs"
        else:
            folder.rmdir()
            folder.write_text("not a folder")
            yield "not a folder"
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(path: Path) -> None:
    """Write zeros to `path` until its file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.mark.parametrize("stack", ["sqlite", "postgresql+redis"])
def test_an_image_a_full_disk_refuses_leaves_the_chat_free(
    stack: str, tmp_path: Path, llm: FakeLLMServer, request: pytest.FixtureRequest
) -> None:
    data = tmp_path / "data"
    with full_disk(data / "uploads") as how:
        env = {**model_env(llm), **stack_env(stack, request), "DATA_DIR": str(data)}
        with running_server(tmp_path / "server", env) as server:
            token = server.create_user("alice")
            first = chat(server, token, {"message": "hi"})
            assert first.status_code == 200, first.text
            session = first.json()["session_id"]
            refused = chat(server, token, {"message": "look at this", "session_id": session, "images": [png_url()]})
            assert refused.status_code == 503, (how, refused.text)
            assert refused.json()["error"]["code"] == "storage_unavailable"
            again = chat(server, token, {"message": "and now?", "session_id": session}, timeout=20)
            assert again.status_code == 200, again.text  # not 409 turn_in_progress: the claim was given back
            assert again.json()["reply"] == "hello"
            if how == "full tmpfs":
                assert not list((data / "uploads").rglob("*.part"))  # nothing half-written is left


class TableLock:
    """Another client holding the messages table locked (PostgreSQL: ACCESS EXCLUSIVE; SQLite:
    an exclusive transaction on the file), as a backup or a migration might."""

    def __init__(self, stack: str, server: ServerUnderTest) -> None:
        self.stack, self.server = stack, server
        self.conn: Any = None

    def __enter__(self) -> TableLock:
        if self.stack == "sqlite":
            import sqlite3

            self.conn = sqlite3.connect(self.server.env["DATABASE_PATH"], isolation_level=None, timeout=10)
            self.conn.execute("BEGIN EXCLUSIVE")
        else:
            import psycopg

            self.conn = psycopg.connect(self.server.env["DATABASE_URL"])
            self.conn.execute("LOCK TABLE chat_messages IN ACCESS EXCLUSIVE MODE")
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.rollback() if self.stack != "sqlite" else self.conn.execute("ROLLBACK")
        self.conn.close()


@pytest.mark.parametrize("stack", STACKS)
def test_a_retry_that_meets_a_locked_table_leaves_the_chat_free(
    stack: str, tmp_path: Path, llm: FakeLLMServer, request: pytest.FixtureRequest
) -> None:
    with running_server(tmp_path / "server", {**model_env(llm), **stack_env(stack, request)}) as server:
        token = server.create_user("alice")
        llm.queue(500, 500)  # the first turn fails (its one retry too): its message stays, unanswered
        failed = chat(server, token, {"message": "please answer"})
        assert failed.status_code == 502, failed.text
        session, message_id = failed.json()["session_id"], failed.json()["user_message_id"]
        with TableLock(stack, server):
            retry = chat(server, token, {"message": "please answer", "session_id": session, "retry_of": message_id})
        assert retry.status_code == 503, retry.text
        assert retry.json()["error"]["code"] == "storage_unavailable"
        again = chat(server, token, {"message": "please answer", "session_id": session, "retry_of": message_id})
        assert again.status_code == 200, again.text  # the claim of the refused Retry was given back
        assert again.json()["reply"] == "hello"


def stream_events(response: requests.Response, until: set[str], found: list[str]) -> None:
    """Read a turn's SSE until one of `until` arrives, noting each event's name in `found`."""
    for line in response.iter_lines(decode_unicode=True):
        if line and line.startswith("event: "):
            found.append(line.removeprefix("event: "))
            if found[-1] in until:
                return


def test_one_users_endless_answers_leave_another_users_turn_answered(tmp_path: Path, llm: FakeLLMServer) -> None:
    env = model_env(llm, TURN_WORKERS="4", TURN_SHARE="2", LLM_IDLE_TIMEOUT_S="600")
    with running_server(tmp_path / "server", env) as server:
        greedy, other = server.create_user("greedy"), server.create_user("other")
        llm.when("tell me everything", StreamReply(pieces=("and so on ",), hang=True))  # every one of greedy's
        sessions = [
            requests.post(f"{server.base}/sessions", json={}, headers=server.auth(greedy), timeout=30).json()["id"]
            for _ in range(4)
        ]
        streams, seen = [], [[] for _ in sessions]
        readers = []
        for index, session in enumerate(sessions):
            response = requests.post(
                f"{server.base}/chat",
                json={"message": f"tell me everything {index}", "session_id": session},
                headers={**server.auth(greedy), "Accept": "text/event-stream"},
                stream=True,
                timeout=120,
            )
            streams.append(response)
            reader = threading.Thread(target=stream_events, args=(response, {"done", "error"}, seen[index]))
            reader.start()
            readers.append(reader)
        wait_for(
            lambda: sum("answer.delta" in names for names in seen) == 2 and sum("turn.queued" in n for n in seen) == 2
        )
        began = time.monotonic()
        answered = chat(server, other, {"message": "hello"}, timeout=60)
        waited = time.monotonic() - began
        assert answered.status_code == 200 and answered.json()["reply"] == "hello"
        assert waited < 30, f"the other user waited {waited:.1f} s behind greedy's answers"
        for session in sessions:
            requests.post(f"{server.base}/sessions/{session}/cancel", json={}, headers=server.auth(greedy), timeout=30)
        for reader in readers:
            reader.join(60)
        assert all(names[-1] == "done" for names in seen), seen
        for response in streams:
            response.close()


def test_an_endless_answer_ends_at_max_turn_s_keeping_what_was_shown(tmp_path: Path, llm: FakeLLMServer) -> None:
    env = model_env(llm, MAX_TURN_S="3", LLM_IDLE_TIMEOUT_S="600")
    with running_server(tmp_path / "server", env) as server:
        token = server.create_user("alice")
        llm.queue(StreamReply(pieces=("It began ", "and went on"), hang=True))
        answer = chat(server, token, {"message": "tell me a story"}, timeout=120)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["stopped"] is True and body["stop_reason"] == "time_limit"
        assert body["reply"] == "It began and went on"
        stored = body["messages"][-1]
        assert stored["role"] == "assistant"
        assert {key: stored["meta"][key] for key in ("stopped", "stop_reason")} == {
            "stopped": True,
            "stop_reason": "time_limit",
        }
        assert llm.answers[-1].wait(30) and llm.answers[-1].client_hung_up  # the model's stream was closed


def wait_for(condition: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_login_flood_from_many_addresses_slows_no_one_else_and_locks_no_owner_out(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    env = model_env(llm, TRUSTED_PROXIES="127.0.0.1", RATE_LIMITS="turns=off,sessions=off,login=10/minute")
    with running_server(tmp_path / "server", env) as server:
        made = requests.post(
            f"{server.base}/api/admin/users",
            json={"name": "victim", "password": "the real password", "token": False},
            headers=server.auth(server.admin_token),
            timeout=60,
        )
        assert made.status_code == 201, made.text
        bystander = server.auth(server.create_user("bystander"))

        def sessions() -> requests.Response:
            return requests.get(f"{server.base}/sessions", headers=bystander, timeout=60)

        calm = timed_requests(sessions, 20)
        with LoginFlood(server.base, "victim", FLOOD_ADDRESSES) as flood:
            wait_for(lambda: len(flood.statuses) >= 200)  # the flood is on: the name is locked by now
            during = timed_requests(sessions, 40)
            owner = owner_signs_in(server.base, "victim", "the real password")
        assert owner.status_code == 200, owner.text
        assert set(flood.statuses) <= {401, 429, 503}, sorted(set(flood.statuses))
        assert 429 in flood.statuses  # the name's failures locked it for the guessing addresses
        assert statistics.median(during) < 1.0, (statistics.median(calm), during)
        assert max(during) < 5.0, (max(calm), during)


def test_an_unknown_word_for_a_boolean_setting_stops_the_start_naming_it(tmp_path: Path) -> None:
    from tests.process_support import clean_env, run_app

    settings = {"database_path": tmp_path / "a.db", "data_dir": tmp_path / "d", "auth_token_file": tmp_path / "t"}
    done = run_app(clean_env(tmp_path, settings, SIGNUP_ENABLED="maybe"))
    assert done.returncode == 2 and "SIGNUP_ENABLED" in done.stderr, done.stderr
    done = run_app(clean_env(tmp_path, settings, LLM_PROVIDER="nosuch"))
    assert done.returncode == 2 and "LLM_PROVIDER" in done.stderr and "ollama" in done.stderr, done.stderr
