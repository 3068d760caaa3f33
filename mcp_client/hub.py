"""The MCP client of one app: an event loop on its own thread, one connection per server.

Built by the app factory (`build_hub`) and closed with the app's services (`close`). The SDK
is async (anyio); the product's turns and requests run on threads. So the hub runs one
asyncio loop on a daemon thread, each server's supervisor is a task on it, and a worker thread
hands it a call with `submit` (`asyncio.run_coroutine_threadsafe`) and waits for the result
within the call's deadline (`tools.call`).

At start the hub waits up to `START_WAIT_S` for the servers' first listings, so a server that
starts promptly has its tools in the first system prompt; a slower one joins the registry
when it comes up (the registry's tools can change at run time: `tools/registry.py`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import mcp_types as types

from mcp_client.config import ServerConfig, load_servers
from mcp_client.connection import ServerConnection
from mcp_client.tools import build_tools
from tools.registry import ToolRegistry

log = logging.getLogger("mcp")

START_WAIT_S = 15.0
CLOSE_WAIT_S = 10.0  # the SDK gives a child 2 s after its stdin closes, 2 more after SIGTERM
GROUP_PREFIX = "mcp:"

T = TypeVar("T")


class McpHub:
    """The loop thread and the connections of one app."""

    def __init__(self, servers: dict[str, ServerConfig], registry: ToolRegistry) -> None:
        self.registry = registry
        self.connections = {key: ServerConnection(key, config, self._joined) for key, config in servers.items()}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-loop", daemon=True)
        self._tasks: list[concurrent.futures.Future[None]] = []
        self._listed = threading.Condition()
        self._closed = False

    def start(self, wait_s: float = START_WAIT_S) -> None:
        """Start every connection; wait (bounded) until each has listed its tools once or failed."""
        self._thread.start()
        self._tasks = [self.submit(connection.run()) for connection in self.connections.values()]
        deadline = time.monotonic() + wait_s
        with self._listed:
            while not all(c.starts > 1 or c.session is not None for c in self.connections.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._listed.wait(min(left, 0.1))

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def _joined(self, connection: ServerConnection, listed: list[types.Tool]) -> None:
        """A server listed its tools (loop thread): they become its group in the registry."""
        tools = build_tools(self.submit, connection, listed)
        refused = self.registry.replace_group(GROUP_PREFIX + connection.key, tools)
        for name in refused:
            log.warning("MCP server %s: tool %s is left out: its name is taken", connection.key, name)
        log.info("MCP server %s: %d tools joined the registry", connection.key, len(tools) - len(refused))
        with self._listed:
            self._listed.notify_all()

    def status(self) -> dict[str, dict[str, Any]]:
        """Each server: connected or not, the protocol revision agreed, how often it started,
        why it last stopped, when it is tried again while known down, and the fault counters."""
        now = time.monotonic()
        return {
            key: {
                "connected": c.session is not None,
                "protocol": c.protocol,
                "starts": c.starts,
                "error": c.last_error,
                "retry_in_s": None if c.outage is None else round(c.outage.retry_in(now), 1),
                "prompted_tries": c.prompted_tries,
                "refused_calls": c.refused_calls,
                "renewals": c.renewals,
                "late_answers": c.late_answers,
                "tools": [tool.name for tool in self.registry.group(GROUP_PREFIX + key)],
            }
            for key, c in self.connections.items()
        }

    def close(self) -> None:
        """Stop every connection (stdio children are stopped by the SDK), then the loop."""
        if self._closed or not self._thread.is_alive():
            self._closed = True
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        concurrent.futures.wait(self._tasks, timeout=CLOSE_WAIT_S)

        async def settle() -> None:  # let the cancelled supervisors finish their clean-up
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if pending:
                await asyncio.wait(pending, timeout=CLOSE_WAIT_S)

        try:
            self.submit(settle()).result(timeout=CLOSE_WAIT_S + 1)
        except Exception:
            log.warning("MCP: some connections did not stop in time")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=CLOSE_WAIT_S)
        if not self._thread.is_alive():
            self._loop.close()


def build_hub(path: str | None, registry: ToolRegistry) -> McpHub | None:
    """The hub of `MCP_SERVERS` (None when it names no server), started."""
    servers = load_servers(path)
    if not servers:
        return None
    hub = McpHub(servers, registry)
    hub.start()
    return hub
