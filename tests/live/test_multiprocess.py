"""Several server processes behind a real nginx behave as one (SPEC 13, issue 14).

Two `python app.py` processes on one SQLite file and one Redis (`REDIS_URL`), a private nginx
in front (tests/nginx_support.py: the README's site, round robin), and one loopback model
(`testing/fake_llm.py`) that the tests hold and release, so nothing here races a clock. nginx
adds `X-Upstream` (which process answered) to each response: a test knows, and asserts, where
each request landed. A request sent to a process's own port forces where a turn runs; nginx's
round robin (one nginx process, no other client) makes the next proxied request land on the
process the test wants (`Cluster.aim`).

Proved here, through nginx: answers stream unbuffered; a stream sees a turn running on either
process, and a `Last-Event-ID` reconnect that lands on the other process replays without a
hole; a cancel stops a turn wherever it runs; one turn per session holds across processes; a
web login holds on every process; two processes that share only PostgreSQL, Redis and
`SECRET_KEY` (each its own `DATA_DIR`, as on two hosts) behave as one; a process killed mid-turn (`kill -9`) cuts its own clients,
ends its turn with `turn_lost` for streams on live processes and leaves the session usable once
its lease expires (`REDIS_TURN_LEASE_S`, short here); `RATE_LIMITS` are one budget across
processes with Redis and one per process without; each client address behind nginx keeps its
own login budget (`X-Forwarded-For`).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from testing.fake_llm import FakeLLMServer, StreamReply
from testing.waiting import wait_until
from tests.cluster_support import Cluster, cluster, upstream
from tests.live_client import (
    READ_S,
    Background,
    Frame,
    active_turn,
    cancel,
    chat,
    new_session,
    open_stream,
    shown_text,
    stored_messages,
    streamed_chat,
    wait_active,
)
from tests.multiprocess_support import ServerProcess
from tests.nginx_support import free_port
from tests.process_support import stop_process
from tests.redis_support import RedisServer, redis_required

pytestmark = pytest.mark.slow

# REDIS_TURN_LEASE_S: how long a turn holds its session without its process renewing the claim.
# The process a test kills has a short one (the test waits it out); the others a longer one, so
# that a busy machine delaying a renewal never frees a session under a running turn.
LEASE_S = 10
DOOMED_LEASE_S = 3

# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(default_reply="plain answer") as server:
        yield server


@pytest.fixture(scope="module")
def redis_of_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis for this module alone (tests/redis_support.py's server, on this suite's ports): its
    processes keep ids, turns and budgets there for the whole module, which the per-test FLUSHALL
    of the shared `redis_url` would wipe under them. Each cluster uses its own database number."""
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed (scripts/services/redis.sh installs it)"
        if redis_required():
            pytest.fail(message)
        pytest.skip(message)
    server = RedisServer(free_port(), tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def two(
    tmp_path_factory: pytest.TempPathFactory, llm: FakeLLMServer, redis_of_module: RedisServer
) -> Iterator[Cluster]:
    """Two processes with one SQLite file and one Redis, behind nginx; no budget gets in the way."""
    folder = tmp_path_factory.mktemp("two")
    with cluster(
        folder,
        llm,
        2,
        REDIS_URL=redis_of_module.url,
        REDIS_TURN_LEASE_S=str(LEASE_S),
        RATE_LIMITS="turns=off,sessions=off",
    ) as group:
        yield group


@pytest.fixture(autouse=True)
def fresh_llm(llm: FakeLLMServer) -> Iterator[None]:
    llm.reset(default_reply="plain answer")
    yield
    llm.released.set()  # a failed test must not leave the model held for the next one


# --- streams through nginx --------------------------------------------------------------------


def test_an_answer_streams_through_nginx_while_the_model_is_still_writing(two: Cluster):
    """The model sends one piece and then keeps its stream open: the piece can only reach the
    client through nginx unbuffered (a buffering proxy holds it until the end, which never comes
    before the Stop below)."""
    user = two.user("streamer")
    session_id = new_session(two.proxy, user)
    two.llm.queue(StreamReply(pieces=("Shown while the model writes. ",), hang=True))
    stream = streamed_chat(two.proxy, user, session_id, "go")
    first = stream.until("answer.delta")
    assert shown_text(first) == "Shown while the model writes. "
    assert not two.llm.answers[-1].completed  # the model has not finished: nothing waited for its end
    assert cancel(two.proxy, user, session_id).status_code == 200
    done = stream.until("done", "error")[-1]
    assert done.name == "done" and done.data["stopped"] is True
    assert stored_messages(two.proxy, user, session_id)[-1]["content"] == "Shown while the model writes. "


def test_a_streamed_turn_through_nginx_ends_with_the_whole_answer(two: Cluster):
    user = two.user("reader")
    session_id = new_session(two.proxy, user)
    two.llm.queue("A whole answer, piece by piece, through the proxy.")
    frames = streamed_chat(two.proxy, user, session_id, "go").until("done", "error")
    assert frames[-1].name == "done"
    assert shown_text(frames) == frames[-1].data["reply"] == "A whole answer, piece by piece, through the proxy."


@pytest.mark.parametrize("runner_index", [0, 1], ids=["turn-on-first", "turn-on-second"])
def test_streams_through_nginx_follow_a_turn_on_either_process(two: Cluster, runner_index: int):
    runner = two.servers[runner_index]
    user = two.user(f"follower{runner_index}")
    session_id = new_session(two.proxy, user)
    reply = "One process answers, both show it."
    two.llm.queue(reply)
    two.llm.released.clear()  # the turn waits on the model while the streams open
    turn = Background(runner.base, user, session_id, "go")
    wait_active(two.proxy, user, session_id)
    streams = []
    for server in two.servers:
        two.aim(server)
        streams.append(open_stream(two.proxy, user, session_id))
    assert [stream.upstream for stream in streams] == [upstream(server) for server in two.servers]
    two.llm.released.set()
    for stream in streams:
        frames = stream.until("done", "error")
        assert frames[-1].name == "done" and shown_text(frames) == reply
    assert turn.result().status_code == 200 and turn.result().json()["reply"] == reply


def test_a_reconnect_through_nginx_lands_on_the_other_process_and_replays_without_a_hole(two: Cluster):
    user = two.user("reconnecting")
    session_id = new_session(two.proxy, user)
    pieces = ("Before the drop. ", "While away, ", "and after. ")
    two.llm.queue(StreamReply(pieces=pieces, delay_s=0.2, hang=True))
    turn = Background(two.servers[0].base, user, session_id, "go")
    wait_active(two.proxy, user, session_id)
    first = open_stream(two.proxy, user, session_id)
    seen = first.until("answer.delta")
    first.close()  # the tab reloads, or the network drops
    last = seen[-1].id
    wait_until(lambda: two.llm.answers[-1].pieces_sent == len(pieces), "the model never sent its pieces")

    elsewhere = next(server for server in two.servers if upstream(server) != first.upstream)
    two.aim(elsewhere)
    second = open_stream(two.proxy, user, session_id, last_event_id=last)
    assert second.upstream == upstream(elsewhere)
    replayed: list[Frame] = []
    while shown_text(seen + replayed) != "".join(pieces):
        replayed += second.until("answer.delta")
    assert cancel(two.proxy, user, session_id).status_code == 200
    replayed += second.until("done", "error")

    assert "replay.gap" not in [frame.name for frame in replayed]
    ids = [frame.id for frame in replayed]
    assert ids == sorted(set(ids)) and ids[0] > last  # nothing twice, nothing older than the cursor
    assert replayed[-1].name == "done" and replayed[-1].data["stopped"] is True
    assert turn.result().json()["messages"][-1]["content"] == shown_text(seen + replayed) == "".join(pieces)


# --- one turn per session, Stop ---------------------------------------------------------------


@pytest.mark.parametrize("runner_index", [0, 1], ids=["turn-on-first", "turn-on-second"])
def test_a_cancel_through_nginx_stops_the_turn_on_the_other_process(two: Cluster, runner_index: int):
    runner = two.servers[runner_index]
    user = two.user(f"stopper{runner_index}")
    session_id = new_session(two.proxy, user)
    two.llm.queue(StreamReply(pieces=("Shown before Stop. ",), hang=True))
    turn = Background(runner.base, user, session_id, "go")
    wait_active(two.proxy, user, session_id)
    open_stream(two.proxy, user, session_id).until("answer.delta")  # the text is shown: Stop keeps it

    two.aim(two.other(runner))
    stop = cancel(two.proxy, user, session_id)
    assert stop.status_code == 200 and stop.headers["X-Upstream"] == upstream(two.other(runner))
    result = turn.result()
    assert result.status_code == 200 and result.json()["stopped"] is True
    assert result.json()["messages"][-1]["content"] == "Shown before Stop. "
    assert two.llm.answer(-1).client_hung_up  # the process running it closed the model's stream
    assert active_turn(two.proxy, user, session_id) is None


def test_one_turn_per_session_holds_across_processes(two: Cluster):
    runner, other = two.servers
    user = two.user("impatient")
    session_id = new_session(two.proxy, user)
    two.llm.released.clear()
    turn = Background(runner.base, user, session_id, "first")
    running = wait_active(runner.base, user, session_id)["turn_id"]

    refused = [chat(server.base, user, session_id, "second") for server in two.servers]
    two.aim(other)
    refused.append(chat(two.proxy, user, session_id, "second"))
    assert refused[-1].headers["X-Upstream"] == upstream(other)
    for answer in refused:
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["code"] == "turn_in_progress"
        assert answer.json()["turn_id"] == running

    two.llm.released.set()
    assert turn.result().status_code == 200
    two.aim(other)
    assert chat(two.proxy, user, session_id, "second").status_code == 200  # free at once after `done`


def test_a_web_login_made_on_one_process_is_valid_on_the_other(two: Cluster):
    """The cookie's key (DATA_DIR/secret.key) and the server-side session (the database) are shared."""
    browser = requests.Session()
    login = browser.post(f"{two.proxy}/api/login", json={"token": two.token("cookie")}, timeout=READ_S)
    assert login.status_code == 200, login.text
    answered = []
    for server in two.servers:
        two.aim(server)
        me = browser.get(f"{two.proxy}/api/me", timeout=READ_S)
        assert me.status_code == 200 and me.json()["name"] == "cookie"
        answered.append(me.headers["X-Upstream"])
    assert answered == [upstream(server) for server in two.servers]


# --- a process dies mid-turn ------------------------------------------------------------------


@contextmanager
def doomed_process(two: Cluster) -> Iterator[ServerProcess]:
    """A third process on the same database and Redis (not behind nginx), for a test to kill."""
    server = two.start("doomed", REDIS_TURN_LEASE_S=str(DOOMED_LEASE_S))
    try:
        yield server
    finally:
        stop_process(server.process, server.log)


def kill_9(server: ServerProcess) -> None:
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout=READ_S)


def test_a_process_killed_mid_turn_ends_its_turn_for_everyone_and_leaves_the_session_usable(two: Cluster):
    user = two.user("survivor")
    session_id = new_session(two.proxy, user)
    with doomed_process(two) as doomed:
        two.llm.released.clear()  # the turn is running (claimed, waiting on the model) when its process dies
        orphan = Background(doomed.base, user, session_id, "lost")
        running = wait_active(two.proxy, user, session_id)["turn_id"]
        on_doomed = open_stream(doomed.base, user, session_id)  # a tab connected to the doomed process
        on_live = open_stream(two.servers[0].base, user, session_id)  # a tab connected to a live one
        started = on_doomed.until("turn.started")
        on_live.until("turn.started")
        kill_9(doomed)

        assert isinstance(orphan.ended(), requests.ConnectionError)  # its client learns that the process died
        with pytest.raises(requests.RequestException):
            on_doomed.until("done", "error")  # cut without an end: the client reconnects
        lost = on_live.until("done", "error")[-1]  # once the lease has expired, the turn is ended for it
        assert lost.name == "error" and lost.data["turn_id"] == running
        assert lost.data["error"]["code"] == "turn_lost"
        wait_until(lambda: active_turn(two.proxy, user, session_id) is None, "the dead process's claim never expired")

        two.llm.released.set()
        again = chat(two.proxy, user, session_id, "again")
        assert again.status_code == 200, again.text
        assert again.json()["reply"] == "plain answer"
        reconnect = open_stream(two.proxy, user, session_id, last_event_id=started[-1].id)
        replayed = reconnect.until("done")  # the reconnecting tab goes on: the lost end, then the next turn
        assert [(f.name, f.data["turn_id"]) for f in replayed if f.name == "error"] == [("error", running)]
        assert replayed[-1].data["reply"] == "plain answer"
    messages = stored_messages(two.proxy, user, session_id)
    assert [m["role"] for m in messages][-2:] == ["user", "assistant"] and messages[-1]["content"] == "plain answer"


def test_when_a_process_dies_nginx_sends_every_new_request_to_the_others(
    tmp_path: Path, llm: FakeLLMServer, redis_of_module: RedisServer
) -> None:
    redis_url = redis_of_module.url.rsplit("/", 1)[0] + "/2"  # a database of its own (user ids repeat)
    with cluster(tmp_path, llm, 2, REDIS_URL=redis_url, RATE_LIMITS="turns=off,sessions=off") as group:
        survivor, dead = group.servers
        user = group.user("unaware")
        session_id = new_session(group.proxy, user)
        kill_9(dead)
        tried = []
        for index in range(4):  # round robin offers the dead process one of the first two
            answer = chat(group.proxy, user, session_id, f"turn {index}")
            assert answer.status_code == 200, answer.text
            tried.append(answer.headers["X-Upstream"].split(", "))  # every process nginx tried, in order
        assert all(attempts[-1] == upstream(survivor) for attempts in tried)
        assert [upstream(dead), upstream(survivor)] in tried  # refused by the dead one, sent on at once
        assert len(stored_messages(group.proxy, user, session_id)) == 8  # each turn ran once


def test_two_hosts_sharing_only_postgresql_and_redis_behave_as_one(
    tmp_path: Path, llm: FakeLLMServer, redis_of_module: RedisServer, pg_url: str
) -> None:
    """As on two machines: each process has a DATA_DIR of its own and shares only the database
    (`DATABASE_URL=postgresql://…`), the live state (`REDIS_URL`) and the cookie key (`SECRET_KEY`)."""
    redis_url = redis_of_module.url.rsplit("/", 1)[0] + "/3"  # a database of its own (user ids repeat)
    settings = {"DATABASE_URL": pg_url, "REDIS_URL": redis_url, "SECRET_KEY": "one key for every host"}
    with cluster(tmp_path, llm, 2, own_data_dirs=True, RATE_LIMITS="turns=off,sessions=off", **settings) as group:
        first, second = group.servers
        token = group.token("traveller")
        user = {"Authorization": f"Bearer {token}"}
        browser = requests.Session()
        group.aim(first)
        assert browser.post(f"{group.proxy}/api/login", json={"token": token}, timeout=READ_S).status_code == 200
        group.aim(second)
        assert browser.get(f"{group.proxy}/api/me", timeout=READ_S).status_code == 200

        session_id = new_session(group.proxy, user)
        llm.queue(StreamReply(pieces=("Written on one host. ",), hang=True))
        turn = Background(first.base, user, session_id, "go")
        wait_active(group.proxy, user, session_id)
        group.aim(second)
        stream = open_stream(group.proxy, user, session_id)
        assert stream.upstream == upstream(second)
        assert shown_text(stream.until("answer.delta")) == "Written on one host. "
        group.aim(second)
        assert chat(group.proxy, user, session_id, "meanwhile").status_code == 409
        group.aim(second)
        stop = cancel(group.proxy, user, session_id)
        assert stop.status_code == 200 and stop.headers["X-Upstream"] == upstream(second)
        assert stream.until("done", "error")[-1].data["stopped"] is True
        assert turn.result().json()["messages"][-1]["content"] == "Written on one host. "
        group.aim(second)
        assert chat(group.proxy, user, session_id, "again").json()["reply"] == "plain answer"


# --- budgets ----------------------------------------------------------------------------------

BUDGET = "turns=3/minute,sessions=off"


def test_with_redis_a_turns_budget_is_one_budget_across_processes(
    tmp_path: Path, llm: FakeLLMServer, redis_of_module: RedisServer
) -> None:
    redis_url = redis_of_module.url.rsplit("/", 1)[0] + "/1"  # not the database of `two`: its users have the same ids
    with cluster(tmp_path, llm, 2, REDIS_URL=redis_url, RATE_LIMITS=BUDGET) as group:
        user = group.user("counted")
        session_id = new_session(group.proxy, user)
        landed = []
        for index in range(3):
            answer = chat(group.proxy, user, session_id, f"turn {index}")
            assert answer.status_code == 200, answer.text
            landed.append(answer.headers["X-Upstream"])
        assert set(landed) == {upstream(server) for server in group.servers}  # both processes spent it
        for base in [server.base for server in group.servers] + [group.proxy]:
            refused = chat(base, user, session_id, "one too many")
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "rate_limited" and int(refused.headers["Retry-After"]) >= 1
        other = group.user("other")  # the budget is the user's, not the processes'
        assert chat(group.proxy, other, new_session(group.proxy, other), "hi").status_code == 200


def test_without_redis_each_process_counts_its_own_budget(tmp_path: Path, llm: FakeLLMServer) -> None:
    """Documented in the README: without REDIS_URL, N processes allow N times each budget."""
    with cluster(tmp_path, llm, 2, RATE_LIMITS=BUDGET) as group:
        user = group.user("counted_twice")
        for server in group.servers:
            session_id = new_session(server.base, user)
            for index in range(3):
                assert chat(server.base, user, session_id, f"turn {index}").status_code == 200
        for server in group.servers:
            assert chat(server.base, user, session_id, "one too many").status_code == 429


def login_from(address: str, port: int, token: str) -> int:
    """`POST /api/login` from the loopback `address` (127.0.0.2, …): another client to nginx."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=READ_S, source_address=(address, 0))
    try:
        connection.request("POST", "/api/login", json.dumps({"token": token}), {"Content-Type": "application/json"})
        return connection.getresponse().status
    finally:
        connection.close()


def test_behind_nginx_each_client_address_keeps_its_own_login_budget(tmp_path: Path, llm: FakeLLMServer) -> None:
    """nginx passes the client's address in X-Forwarded-For and the server believes it from
    nginx's address (TRUSTED_PROXIES, set by `cluster`): else every client would share nginx's
    address, and one guessing tokens would lock everyone out."""
    with cluster(tmp_path, llm, 1, RATE_LIMITS="login=2/minute") as group:
        assert group.nginx is not None
        port = group.nginx.port
        assert [login_from("127.0.0.2", port, "wrong") for _ in range(3)] == [401, 401, 429]
        assert login_from("127.0.0.3", port, "wrong") == 401
        assert login_from("127.0.0.3", port, group.token("honest")) == 200
