"""A temp database, two users and helpers to call the workspace tools through `run_tool`.

Shared by `test_workspace_paths.py` and `test_workspace_tools.py`; every call goes through
the real runner, so validation, deadlines and error codes are the production ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.store_support import TwoUserStore
from tools.base import Tool, ToolContext, ToolResult
from tools.runner import run_tool
from tools.workspace import WORKSPACE_TOOLS
from tools.workspace.paths import workspace_root

TOOLS: dict[str, Tool[Any, Any]] = {tool.name: tool for tool in WORKSPACE_TOOLS}


class Workspaces(TwoUserStore):
    """Alice and Bob, each with a workspace under `tmp/data`, and an `outside` directory."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.outside = tmp_path / "outside"
        self.outside.mkdir()
        self.secret = self.outside / "secret.txt"
        self.secret.write_text("TOP SECRET outside the sandbox\n")

    def ctx(self, user: int | None = None) -> ToolContext:
        user = self.alice if user is None else user
        return ToolContext(conn=self.conn, database=self.database, settings=self.settings, user_id=user)

    def root(self, user: int | None = None) -> Path:
        return workspace_root(self.settings, self.alice if user is None else user)

    def run(self, name: str, user: int | None = None, tool: Tool[Any, Any] | None = None, **raw: Any) -> ToolResult:
        return run_tool(tool or TOOLS[name], raw, self.ctx(user))

    def ok(self, name: str, user: int | None = None, **raw: Any) -> ToolResult:
        result = self.run(name, user, **raw)
        assert result.ok, result.display_text()
        return result

    def fail(self, name: str, code: str, user: int | None = None, **raw: Any) -> str:
        result = self.run(name, user, **raw)
        assert not result.ok, result.text
        assert result.error_code == code, result.display_text()
        assert result.display_text().startswith(f"Error: {code}: ")
        return result.message

    def close(self) -> None:
        self.conn.close()
