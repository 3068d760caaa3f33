"""What calling an MCP tool through a command adds over calling it with the SDK directly.

Two ways, interleaved call by call in one run, against the same kind of server:

- **direct**: `await session.call_tool(...)` of the official SDK (`mcp`), in an asyncio loop of
  its own, timed inside the loop (the SDK's own cost plus the server's);
- **command**: the product's path from a detected command line to a stored result: the
  detector, the router, the generic binding, validation against the tool's `inputSchema`,
  the hand-off from the caller's thread to the hub's loop (`mcp_client/`) and back, the
  result turned into data (`mcp_client/results.py`), the caps, and the contract text
  (`tools.contract.stored_result`), timed on the calling thread as a turn's worker sees it.

Added = command minus direct, at the same percentile (and the p50 of the paired differences).
Servers: stdio, `mcp-server-time` from PyPI (`.mcp-servers/`, scripts/services/mcp_servers.sh);
HTTP, the SDK server of the tests (`tests/mcp_http_support.py`, tool `echo`) on loopback.

    .venv/bin/python bench/mcp.py --calls 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)  # not bench/: this file's own name would shadow the SDK (`mcp`)

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from bench.common import p50_p95, percentile  # noqa: E402
from commands.detect import detect_command  # noqa: E402
from commands.router import route  # noqa: E402
from mcp_client.config import parse_servers  # noqa: E402
from mcp_client.hub import McpHub  # noqa: E402
from tests.mcp_http_support import HttpMcpServer  # noqa: E402
from tests.store_support import TwoUserStore  # noqa: E402
from tools.base import ToolContext  # noqa: E402
from tools.contract import stored_result  # noqa: E402
from tools.registry import ToolRegistry  # noqa: E402


class DirectClient:
    """An SDK session on its own loop thread; `call` returns the in-loop milliseconds."""

    def __init__(self, opener: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.opener = opener
        self.session: ClientSession | None = None
        self.stop = asyncio.Event()
        self.ready = threading.Event()
        self.runner = asyncio.run_coroutine_threadsafe(self._run(), self.loop)
        if not self.ready.wait(30):
            raise RuntimeError("the direct session did not start")

    async def _run(self) -> None:
        self.stop = asyncio.Event()
        # the era our client agrees (server/discover, else initialize), so both paths speak the same one
        async with Client(self.opener(), mode="auto", cache=None) as client:
            session = client.session
            await session.list_tools()
            self.session = session
            self.ready.set()
            await self.stop.wait()

    def call(self, tool: str, arguments: dict[str, Any]) -> float:
        async def timed() -> float:
            assert self.session is not None
            started = time.perf_counter()
            result = await self.session.call_tool(tool, arguments)
            assert not result.is_error
            return (time.perf_counter() - started) * 1000

        return asyncio.run_coroutine_threadsafe(timed(), self.loop).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.runner.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def measure(
    label: str, servers: str, direct: DirectClient, line: str, tool: str, arguments: dict[str, Any], calls: int
) -> None:
    registry = ToolRegistry()
    hub = McpHub(parse_servers(servers), registry)
    hub.start()
    world = TwoUserStore(Path(tempfile.mkdtemp()))
    ctx = ToolContext(conn=world.conn, database=world.database, settings=world.settings, user_id=world.alice)
    command = detect_command(line)
    assert command is not None

    def through_command() -> float:
        started = time.perf_counter()
        routed = route(command, registry, ctx)
        stored_result(routed.role, command.name, command.line, routed.result)
        elapsed = (time.perf_counter() - started) * 1000
        assert routed.result.ok, routed.result
        return elapsed

    for _ in range(20):  # warm both paths
        direct.call(tool, arguments)
        through_command()
    direct_ms, command_ms = [], []
    for index in range(calls):
        if index % 2:
            command_ms.append(through_command())
            direct_ms.append(direct.call(tool, arguments))
        else:
            direct_ms.append(direct.call(tool, arguments))
            command_ms.append(through_command())
    hub.close()
    world.conn.close()
    added = [c - d for c, d in zip(command_ms, direct_ms, strict=True)]
    print(f"{label}: {calls} calls each, interleaved")
    print(f"   direct (SDK call_tool)      {p50_p95(direct_ms)}")
    print(f"   through a command           {p50_p95(command_ms)}")
    print(
        f"   added at p50 {percentile(command_ms, 0.5) - percentile(direct_ms, 0.5):.2f} ms, "
        f"at p95 {percentile(command_ms, 0.95) - percentile(direct_ms, 0.95):.2f} ms; "
        f"paired differences p50 {statistics.median(added):.2f} ms (target p50 < 5 ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    time_server = ROOT / ".mcp-servers" / "bin" / "mcp-server-time"
    if time_server.is_file():
        direct = DirectClient(lambda: stdio_client(StdioServerParameters(command=str(time_server))))
        servers = json.dumps({"mcpServers": {"time": {"command": str(time_server)}}})
        measure(
            "stdio (mcp-server-time, get_current_time)",
            servers,
            direct,
            "/time_get_current_time Europe/Paris",
            "get_current_time",
            {"timezone": "Europe/Paris"},
            args.calls,
        )
        direct.close()
    else:
        print("stdio: skipped (scripts/services/mcp_servers.sh installs mcp-server-time)")
    with HttpMcpServer() as server:
        direct = DirectClient(lambda: streamable_http_client(server.url))
        servers = json.dumps({"mcpServers": {"h": {"url": server.url, "trusted": True}}})
        measure(
            "HTTP (SDK server on loopback, echo)",
            servers,
            direct,
            "/h_echo hello",
            "echo",
            {"text": "hello"},
            args.calls,
        )
        direct.close()


if __name__ == "__main__":
    main()
