"""`/mcp` under hostile input and load, against a real server process (SPEC 12).

A body too large, too deep, too wide, not UTF-8 or not JSON-RPC is a clear 4xx (a JSON-RPC
error where the transport allows one), never a 500, and the server's memory does not grow
with the number of such bodies. One user's flood of slow calls holds at most its share of
the call threads: another user's call is answered while the flood is still held.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import anyio
import pytest
import requests

from testing.loopback import LoopbackServer, QuietHandler
from testing.waiting import wait_until
from tests.async_support import run_async
from tests.mcp_support import SEARXNG, McpServer, error_of, mcp_server, session, structured

pytestmark = pytest.mark.slow

CAP = 8 * 1024 * 1024  # api.bodies.MAX_BODY_BYTES
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    with mcp_server(tmp_path_factory.mktemp("mcp-hostile")) as running:
        yield running


def post(server: McpServer, body: bytes | Iterator[bytes]) -> requests.Response:
    headers = {**HEADERS, "Authorization": f"Bearer {server.alice}"}
    return requests.post(server.url, data=body, headers=headers, timeout=60)


def call(name: str, arguments: Any) -> bytes:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return json.dumps(message).encode()


HOSTILE: dict[str, tuple[bytes, int, int | None]] = {  # body, HTTP status, JSON-RPC error code
    "nested 100,000 deep": (b"[" * 100_000 + b"]" * 100_000, 400, -32700),
    "30,000 values": (b"[" + b",".join([b"1"] * 30_000) + b"]", 400, -32700),
    "cut JSON": (b'{"jsonrpc":', 400, -32700),
    "not UTF-8": (b'{"jsonrpc":"2.0","id":1,"method":"\xff"}', 400, -32700),
    "lone surrogate": (b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"\\ud800"}}', 400, -32700),
    "a batch": (b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]', 400, -32602),
    "not JSON-RPC": (b'{"foo": 1}', 400, -32602),
    "params not an object": (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}', 400, -32602),
    "arguments not an object": (call("memory_search", [1, 2]), 200, -32602),
    "unknown method": (b'{"jsonrpc":"2.0","id":1,"method":"nope/nope"}', 200, -32601),
    "over the cap": (call("memory_search", {"query": "a" * (CAP + 1)}), 413, None),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_body_is_a_clear_error_never_a_500(server: McpServer, case: str) -> None:
    body, status, rpc_code = HOSTILE[case]
    answer = post(server, body)
    assert answer.status_code == status, answer.text[:500]
    if rpc_code is None:
        assert answer.json()["error"]["code"] == "payload_too_large"
    else:
        assert answer.json()["error"]["code"] == rpc_code
        assert answer.json()["error"]["message"]


def test_a_chunked_body_over_the_cap_is_413_read_no_further(server: McpServer) -> None:
    sent = [0]

    def chunks() -> Iterator[bytes]:
        for _ in range(4 * CAP // (256 * 1024)):
            sent[0] += 1
            yield b"a" * (256 * 1024)

    try:
        answer = post(server, chunks())
    except requests.ConnectionError:  # the server answered and closed while the client still sent
        return
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "payload_too_large"


def test_a_body_that_is_not_json_is_415(server: McpServer) -> None:
    headers = {**HEADERS, "Content-Type": "text/plain", "Authorization": f"Bearer {server.alice}"}
    answer = requests.post(server.url, data=b'{"jsonrpc":"2.0","id":1,"method":"ping"}', headers=headers, timeout=30)
    assert answer.status_code == 415 and answer.json()["error"]["code"] == "unsupported_media_type"


def test_a_get_holds_no_stream_open(server: McpServer) -> None:
    answer = requests.get(server.url, headers={**HEADERS, "Authorization": f"Bearer {server.alice}"}, timeout=30)
    assert answer.status_code == 405 and answer.headers["Allow"] == "POST"


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_memory_does_not_grow_with_the_number_of_hostile_bodies(server: McpServer) -> None:
    near_cap = [
        b"[" * 60 + b"1," * (CAP // 2 - 200) + b"1" + b"]" * 60,  # within depth, far over the values
        call("memory_search", {"query": "a" * (CAP - 200)}),  # within every limit, a long string
        b"{" * (CAP // 2) + b"}" * (CAP // 2),
    ]
    for body in near_cap:  # warm up: the allocator's arenas reach their working size
        assert post(server, body).status_code < 500
    settled = rss_bytes(server.pid)
    for _ in range(5):
        for body in near_cap:
            assert post(server, body).status_code < 500
    assert rss_bytes(server.pid) - settled < 64 * 1024 * 1024
    assert post(server, call("memory_search", {"query": "still answers"})).status_code == 200


class GatedSearch(LoopbackServer):
    """A SearXNG fake that holds every request until `release` is set, counting those held."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.held = 0
        self.most_held = 0
        self.served = 0
        super().__init__()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                with fake._lock:
                    fake.held += 1
                    fake.most_held = max(fake.most_held, fake.held)
                fake.release.wait(60)
                # Counted as let go BEFORE the answer is written: once the caller has read it, its
                # next call may reach this fake before a later count would have run.
                with fake._lock:
                    fake.held -= 1
                    fake.served += 1
                body = json.dumps(SEARXNG).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


def test_one_users_flood_of_slow_calls_leaves_another_user_a_thread(tmp_path: Path) -> None:
    """WEB_THREADS=4: alice's 8 concurrent searches hold at most 2 call threads (her share);
    bob's call runs while all of hers are still held by the gated search backend."""
    with GatedSearch() as search, mcp_server(tmp_path, WEB_THREADS="4", SEARCH_URL=search.base_url) as server:

        async def scenario() -> tuple[list[Any], Any]:
            flood: list[Any] = []
            async with session(server.url, server.alice) as alice, anyio.create_task_group() as group:

                async def one() -> None:
                    flood.append(await alice.call_tool("web_search", {"query": "mars rover"}))

                for _ in range(8):
                    group.start_soon(one)
                await anyio.to_thread.run_sync(
                    lambda: wait_until(lambda: search.held == 2, "alice's calls never reached the backend")
                )
                with anyio.fail_after(30):  # a deadlock detector, not a latency bound
                    async with session(server.url, server.bob) as bob:
                        bobs = await bob.call_tool("memory_search", {"query": "anything"})
                held_meanwhile = search.held
                search.release.set()
                assert held_meanwhile == 2 and search.served == 0  # bob was answered while alice's calls were held
            return flood, bobs

        flood, bobs = run_async(scenario)
        assert bobs.is_error is False and structured(bobs)["hits"] == []
        assert len(flood) == 8 and all(result.is_error is False for result in flood)
        assert search.most_held == 2 and search.served == 8


def test_a_users_queue_of_calls_is_bounded_the_excess_is_busy_at_once(tmp_path: Path) -> None:
    """WEB_THREADS=2: a user may have 8 calls running or waiting (4 per call thread); of 12 sent
    at once while the backend holds them, 4 answer BUSY at once and 8 run once it lets go."""
    with GatedSearch() as search, mcp_server(tmp_path, WEB_THREADS="2", SEARCH_URL=search.base_url) as server:

        async def scenario() -> list[Any]:
            answers: list[Any] = []
            async with session(server.url, server.alice) as alice, anyio.create_task_group() as group:

                async def one() -> None:
                    answers.append(await alice.call_tool("web_search", {"query": "mars rover"}))

                for _ in range(12):
                    group.start_soon(one)
                await anyio.to_thread.run_sync(
                    lambda: wait_until(lambda: len(answers) == 4 and search.held == 1, "the excess was not refused")
                )
                early = list(answers)
                search.release.set()
            assert all(error_of(result)["code"] == "BUSY" for result in early)
            return answers

        answers = run_async(scenario)
        assert sorted(result.is_error for result in answers) == [False] * 8 + [True] * 4
        assert search.served == 8 and search.most_held == 1
