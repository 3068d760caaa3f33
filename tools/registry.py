"""The typed tool registry: a plain dict of tools, filled by explicit `register` calls.

Everything that lists tools derives from here: the command list in the system prompt,
`GET /tools`, `POST /tools/<name>` and command routing. Adding a tool is one `register`
call in `tools/catalog.py`; no prompt or schema is edited by hand.

Tools that come from outside the process (an MCP server's, `mcp_client/`) join and leave at
run time as a named group (`replace_group`): the dicts are replaced, never changed in place,
so a reader on another thread (a turn listing its commands, `GET /tools`) sees one whole
version or the next, and `version` tells the caches built from the registry (the system
prompts, the OpenAPI document) that they are stale.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from tools.base import Tool


class DuplicateToolError(Exception):
    """Two tools (or two commands) were registered under one name."""


class ToolRegistry:
    """Tools by name and by command name (both case-insensitive)."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool[Any, Any]] = {}
        self._commands: dict[str, Tool[Any, Any]] = {}
        self._groups: dict[str, frozenset[str]] = {}  # group -> the tool keys it added
        self._lock = threading.Lock()  # writers only: readers take the current dicts as they are
        self.version = 0  # grows with every change

    def register(self, tool: Tool[Any, Any]) -> None:
        with self._lock:
            tools, commands = dict(self._tools), dict(self._commands)
            self._add(tool, tools, commands)
            self._tools, self._commands = tools, commands
            self.version += 1

    @staticmethod
    def _add(tool: Tool[Any, Any], tools: dict[str, Tool[Any, Any]], commands: dict[str, Tool[Any, Any]]) -> None:
        key = tool.name.lower()
        if key in tools:
            raise DuplicateToolError(f"tool {tool.name!r} is already registered")
        command = tool.command.name.lower() if tool.command is not None else None
        if command is not None and command in commands:
            raise DuplicateToolError(f"command /{command} is already registered")
        tools[key] = tool
        if command is not None:
            commands[command] = tool

    def replace_group(self, group: str, members: Sequence[Tool[Any, Any]]) -> list[str]:
        """Make `members` the tools of `group` (an MCP server), dropping the group's former ones.

        A member whose name or command another group (or a built-in tool) holds is left out:
        its name is in the returned list, for the caller to log. Nothing else changes."""
        with self._lock:
            former = self._groups.get(group, frozenset())
            tools = {key: tool for key, tool in self._tools.items() if key not in former}
            commands = {name: tool for name, tool in self._commands.items() if tool.name.lower() not in former}
            added: set[str] = set()
            refused: list[str] = []
            for tool in members:
                try:
                    self._add(tool, tools, commands)
                except DuplicateToolError:
                    refused.append(tool.name)
                else:
                    added.add(tool.name.lower())
            self._tools, self._commands = tools, commands
            self._groups[group] = frozenset(added)
            self.version += 1
            return refused

    def group(self, group: str) -> list[Tool[Any, Any]]:
        """The tools `group` holds now."""
        keys = self._groups.get(group, frozenset())
        return [tool for key, tool in self._tools.items() if key in keys]

    def get(self, name: str) -> Tool[Any, Any] | None:
        return self._tools.get(name.lower())

    def for_command(self, name: str) -> Tool[Any, Any] | None:
        return self._commands.get(name.lower())

    def __iter__(self) -> Iterator[Tool[Any, Any]]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def commands(self) -> list[Tool[Any, Any]]:
        """Tools reachable as `/commands`, in registration order."""
        return list(self._commands.values())

    def function_schemas(self) -> list[dict[str, Any]]:
        return [tool.function_schema() for tool in self._tools.values()]
