"""5,000 open streams through nginx, and the next user is still served (issue 24 item 9).

Each stream costs nginx two connections (the client's and the one to the process), and a
worker refuses every new connection past `worker_connections`: with Debian's 768 a worker
(1,024 in the tests' old main context), new connections failed past about 500 streams,
`POST /sessions` included. Here a real server (`python app.py`) with `MAX_CONNECTIONS` a
little above 5,000 sits behind a private nginx configured with exactly the capacity lines
`serving.nginx_conf.main_conf` prints for that setting (and started with systemd's soft
limit of 1,024 open files, as Debian's is). One user holds 5,000 progress streams open
(through an asyncio client: a coroutine per stream); then that user creates a session and
runs a turn, and another user's request is answered. The streams follow ten turns whose
model never answers (the fake sends its headers and holds), so they stay open and idle.

Asserted on counts, never on time: every stream opened (200 and its first frame), nginx's
worker held two descriptors per stream and logged no shortage, the server's threads did not
grow with the streams (SPEC 7a.6: an idle stream costs no thread), and the new requests
answered as they do on an idle server. The figures (RSS of the server and of nginx's worker)
are printed for bench/README.md.
"""

from __future__ import annotations

import asyncio
import os
import resource
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

import testing.fake_llm as fake_llm
from serving.nginx_conf import worker_connections, worker_open_files
from testing.fake_llm import FakeLLMServer, StreamReply
from tests.async_support import run_async
from tests.live_client import READ_S, new_session, shown_text, streamed_chat
from tests.multiprocess_support import ServerProcess, server_env, start_server
from tests.nginx_support import Nginx, free_port, nginx_required, running_nginx
from tests.process_support import run_app, stop_process

pytestmark = pytest.mark.slow

STREAMS = 5_000
MAX_CONNECTIONS = 5_200  # the server's: the streams, and room for the requests next to them
HELD_TURNS = 10  # the streams follow these turns (500 each), whose model never answers
OPENING_AT_ONCE = 200  # connections being opened at the same time (the listen backlog is finite)
FIRST_BLOCKS = 4  # blank-line-ended blocks read while looking for the first event
SPARE_FILES = 1_000  # this process's own descriptors beyond the streams
WEB_THREADS = 16  # the server's pool for ordinary requests, started lazily: the only threads that may appear
THREADS_GROWTH = WEB_THREADS + 4  # the pool, and a few of uvicorn's and the turns'; none per stream


def raise_own_open_files(wanted: int, nginx_wants: int) -> None:
    """This process holds one socket per stream, and nginx (its child) may lift its own soft limit
    only up to the hard limit it inherits: lift both, or skip where they cannot be (fail under CI
    or NGINX_REQUIRED=1, where the capacity must be proved)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < nginx_wants:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, nginx_wants), nginx_wants))
        except (OSError, ValueError):
            message = f"the hard open-file limit {hard} is below the {nginx_wants} nginx's worker is set to"
            if nginx_required():
                pytest.fail(message)
            pytest.skip(message)
        hard = nginx_wants
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def status_of(pid: int) -> dict[str, int]:
    """VmRSS (KB) and Threads of a process, and how many descriptors it has open."""
    found = {"fds": len(os.listdir(f"/proc/{pid}/fd"))}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            found[key] = int(value.split()[0])
    return found


def open_files_limit(pid: int) -> int:
    """The soft RLIMIT_NOFILE of a process, from /proc/<pid>/limits."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError(f"no open-file limit for {pid}")


@dataclass
class Held:
    """The open streams, each a socket read up to its first frame."""

    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


async def first_frame(reader: asyncio.StreamReader) -> bytes:
    """The stream's body up to its first event (after the `retry:` line; a replayed one counts)."""
    body = b""
    for _ in range(FIRST_BLOCKS):
        body += await reader.readuntil(b"\n\n")
        if b"event: " in body:
            break
    return body


async def open_stream(port: int, token: str, session_id: str, gate: asyncio.Semaphore, held: Held) -> None:
    """`GET /sessions/<id>/generate/stream` through nginx, read to its first frame, left open."""
    async with gate:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as error:
            held.failures.append(f"connect: {error!r}")
            return
        writer.write(
            f"GET /sessions/{session_id}/generate/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_S)
            first = await asyncio.wait_for(first_frame(reader), READ_S)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as error:
            held.failures.append(f"read: {error!r}")
            writer.close()
            return
        if not head.startswith(b"HTTP/1.1 200") or b"event: " not in first:
            held.failures.append(head.split(b"\r\n", 1)[0].decode(errors="replace"))
            writer.close()
            return
        held.writers.append(writer)


@dataclass
class Deployment:
    server: ServerProcess
    nginx: Nginx
    llm: FakeLLMServer
    env: dict[str, str]

    def user(self, name: str) -> dict[str, str]:
        made = run_app(self.env, "create-user", name)
        assert made.returncode == 0, made.stderr
        return {"Authorization": f"Bearer {made.stdout.strip().splitlines()[-1].strip()}"}


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    """One server process accepting `MAX_CONNECTIONS`, behind nginx sized for that."""
    raise_own_open_files(STREAMS + SPARE_FILES, worker_open_files(1, MAX_CONNECTIONS))
    monkeypatch.setattr(fake_llm, "POLL_S", 0.25)  # the held answers check for a hang-up 4 times a second
    with FakeLLMServer(default_reply="Still here.") as llm:
        env = server_env(
            tmp_path,
            LLM_PROVIDER="openai",
            LLM_BASE_URL=llm.openai_base_url,
            LLM_MODEL="m",
            LLM_TIMEOUT_S="600",
            MAX_CONNECTIONS=str(MAX_CONNECTIONS),
            MAX_STREAMS_PER_USER=str(STREAMS + HELD_TURNS + 10),
            RATE_LIMITS="turns=off,sessions=off",
            WEB_THREADS=str(WEB_THREADS),
            TRUSTED_PROXIES="127.0.0.1",
        )
        server = start_server(tmp_path, "server", env, free_port())
        try:
            backend = [f"127.0.0.1:{server.port}"]
            with running_nginx(tmp_path / "nginx", backend, max_connections=MAX_CONNECTIONS) as nginx:
                yield Deployment(server, nginx, llm, env)
        finally:
            stop_process(server.process, server.log)


def hold_turns(deployment: Deployment, user: dict[str, str]) -> list[str]:
    """`HELD_TURNS` sessions, each with a turn running whose model sent its headers and holds."""
    deployment.llm.queue(*[StreamReply((), hang=True)] * HELD_TURNS)
    sessions = []
    for index in range(HELD_TURNS):
        session_id = new_session(deployment.nginx.base, user)
        stream = streamed_chat(deployment.nginx.base, user, session_id, f"take your time {index}")
        stream.until("turn.started")
        stream.close()  # closing a stream never cancels its turn
        sessions.append(session_id)
    return sessions


def a_turn_answers(base: str, user: dict[str, str]) -> str:
    """A new session and a streamed turn in it, through nginx: what the user is shown."""
    session_id = new_session(base, user)
    frames = streamed_chat(base, user, session_id, "are you there?").until("done", "error")
    assert frames[-1].name == "done", frames[-1]
    return shown_text(frames)


def test_5000_streams_through_nginx_leave_room_for_new_sessions_turns_and_other_users(deployment: Deployment):
    base, nginx, server = deployment.nginx.base, deployment.nginx, deployment.server
    holder = server.auth
    token = holder["Authorization"].removeprefix("Bearer ")
    other = deployment.user("other")
    sessions = hold_turns(deployment, holder)
    assert a_turn_answers(base, other) == "Still here."  # warm: the turn workers, the provider connection
    worker = nginx.worker_pid()
    before = {"server": status_of(server.process.pid), "nginx": status_of(worker)}

    async def hold_and_ask() -> tuple[Held, dict[str, dict[str, int]], list[object]]:
        held, gate = Held(), asyncio.Semaphore(OPENING_AT_ONCE)
        await asyncio.gather(
            *[open_stream(nginx.port, token, sessions[i % HELD_TURNS], gate, held) for i in range(STREAMS)]
        )
        during = {"server": status_of(server.process.pid), "nginx": status_of(worker)}
        # with every stream open: the holder makes a session and a turn, another user is answered
        answers: list[object] = [
            await asyncio.to_thread(a_turn_answers, base, holder),
            await asyncio.to_thread(a_turn_answers, base, other),
            await asyncio.to_thread(
                lambda: requests.get(f"{base}/sessions", headers=other, timeout=READ_S).status_code
            ),
        ]
        for writer in held.writers:
            writer.close()
        return held, during, answers

    held, during, answers = run_async(hold_and_ask)

    assert held.failures == [], f"{len(held.failures)} streams failed: {sorted(set(held.failures))[:5]}"
    assert len(held.writers) == STREAMS
    assert answers == ["Still here.", "Still here.", 200]
    assert open_files_limit(worker) >= 2 * STREAMS  # worker_rlimit_nofile lifted systemd's 1,024
    log = nginx.error_log()
    assert "worker_connections are not enough" not in log
    assert "Too many open files" not in log
    # nginx held both ends of every stream, within what the capacity lines allow
    assert during["nginx"]["fds"] >= 2 * STREAMS
    assert during["nginx"]["fds"] < worker_connections(1, MAX_CONNECTIONS)
    assert during["server"]["fds"] >= STREAMS
    assert during["server"]["Threads"] <= before["server"]["Threads"] + THREADS_GROWTH
    print(
        f"\n{STREAMS} streams through nginx: server RSS {before['server']['VmRSS'] / 1024:.1f} -> "
        f"{during['server']['VmRSS'] / 1024:.1f} MB, threads {before['server']['Threads']} -> "
        f"{during['server']['Threads']}; nginx worker RSS {before['nginx']['VmRSS'] / 1024:.1f} -> "
        f"{during['nginx']['VmRSS'] / 1024:.1f} MB, descriptors {before['nginx']['fds']} -> {during['nginx']['fds']}"
    )
