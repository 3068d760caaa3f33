"""Helpers of the MCP client tests: the real servers from PyPI, server files, child processes.

`mcp-server-time` and `mcp-server-git` live in `.mcp-servers/` (scripts/services/mcp_servers.sh,
requirements-mcp-servers.txt). Without them the tests that need them skip, or fail under CI=true
or MCP_SERVERS_REQUIRED=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVERS_BIN = ROOT / ".mcp-servers" / "bin"


def required() -> bool:
    return os.environ.get("CI", "") not in ("", "false") or os.environ.get("MCP_SERVERS_REQUIRED") == "1"


def real_server(name: str) -> str:
    """The path of a pinned real server's executable (skip, or fail under CI, when missing)."""
    path = SERVERS_BIN / name
    if not path.is_file():
        message = f"{name} is not installed (scripts/services/mcp_servers.sh)"
        if required():
            pytest.fail(message)
        pytest.skip(message)
    return str(path)


def write_servers(tmp: Path, servers: dict[str, Any]) -> str:
    path = tmp / f"mcp-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return str(path)


def marked(env: dict[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """A unique mark put in a child's environment, to find its processes later."""
    mark = uuid.uuid4().hex
    return mark, {**(env or {}), "MCP_TEST_MARK": mark}


def processes_with(mark: str) -> list[int]:
    """Live processes (not zombies) whose environment holds `MCP_TEST_MARK=<mark>`."""
    wanted = f"MCP_TEST_MARK={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found


def git_repo(path: Path) -> Path:
    """A repository with one commit, `first commit`."""
    path.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(path), "-c", "user.email=t@example.org", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "notes.txt").write_text("hello\n")
    subprocess.run([*git, "add", "notes.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "first commit"], check=True)
    return path
