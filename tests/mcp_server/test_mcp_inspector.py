"""`/mcp` driven by the MCP Inspector's CLI mode (npm's `@modelcontextprotocol/inspector`), software
nobody here wrote, against a real server process: it lists our tools, calls one, and sees
another user's data invisible and a wrong token refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.inspector_support import inspector, run_cli
from tests.mcp_support import McpServer, mcp_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    inspector()  # skip (or fail under CI) before starting anything
    with mcp_server(tmp_path_factory.mktemp("mcp-inspector")) as running:
        yield running


def answer(done: Any) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def test_the_inspector_lists_our_tools_with_their_hints(server: McpServer, tmp_path: Path) -> None:
    listed = answer(run_cli(server.url, server.alice, "--method", "tools/list", home=tmp_path))
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert {"memory_search", "memory_sql", "read_file", "write_file", "weather", "web_search", "run_code"} <= set(tools)
    assert tools["memory_search"]["annotations"]["readOnlyHint"] is True
    assert tools["write_file"]["annotations"]["destructiveHint"] is True
    assert tools["memory_search"]["inputSchema"]["required"] == ["query"]
    assert "hits" in tools["memory_search"]["outputSchema"]["properties"]


def test_the_inspector_calls_a_tool_and_another_users_data_stays_invisible(server: McpServer, tmp_path: Path) -> None:
    stored = answer(
        run_cli(
            server.url,
            server.alice,
            "--method",
            "tools/call",
            "--tool-name",
            "remember",
            "--tool-arg",
            "fact=alice keeps the key under the mat",
            home=tmp_path,
        )
    )
    assert stored["isError"] is False and stored["structuredContent"]["content"] == "alice keeps the key under the mat"
    search = ("--method", "tools/call", "--tool-name", "memory_search", "--tool-arg", "query=mat")
    mine = answer(run_cli(server.url, server.alice, *search, home=tmp_path))
    assert [hit["source"] for hit in mine["structuredContent"]["hits"]] == ["memory"]
    theirs = answer(run_cli(server.url, server.bob, *search, home=tmp_path))
    assert theirs["isError"] is False and theirs["structuredContent"]["hits"] == []
    assert "under the mat" not in json.dumps(theirs)


def test_the_inspector_with_a_wrong_token_is_refused(server: McpServer, tmp_path: Path) -> None:
    done = run_cli(server.url, "not-a-token", "--method", "tools/list", home=tmp_path)
    assert done.returncode != 0
    assert "unauthorized" in done.stderr and "memory_search" not in done.stdout
