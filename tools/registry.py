"""The typed tool registry: a plain dict of tools, filled by explicit `register` calls.

Everything that lists tools derives from here: the command list in the system prompt,
`GET /tools`, `POST /tools/<name>` and command routing. Adding a tool is one `register`
call in `tools/catalog.py`; no prompt or schema is edited by hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tools.base import Tool


class DuplicateToolError(Exception):
    """Two tools (or two commands) were registered under one name."""


class ToolRegistry:
    """Tools by name and by command name (both case-insensitive)."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool[Any, Any]] = {}
        self._commands: dict[str, Tool[Any, Any]] = {}

    def register(self, tool: Tool[Any, Any]) -> None:
        key = tool.name.lower()
        if key in self._tools:
            raise DuplicateToolError(f"tool {tool.name!r} is already registered")
        self._tools[key] = tool
        if tool.command is not None:
            command = tool.command.name.lower()
            if command in self._commands:
                raise DuplicateToolError(f"command /{command} is already registered")
            self._commands[command] = tool

    def get(self, name: str) -> Tool[Any, Any] | None:
        return self._tools.get(name.lower())

    def for_command(self, name: str) -> Tool[Any, Any] | None:
        return self._commands.get(name.lower())

    def __iter__(self) -> Iterator[Tool[Any, Any]]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def commands(self) -> list[Tool[Any, Any]]:
        """Tools reachable as `/commands`, in registration order."""
        return list(self._commands.values())

    def function_schemas(self) -> list[dict[str, Any]]:
        return [tool.function_schema() for tool in self._tools.values()]
