"""`/mcp` driven by the MCP Inspector's CLI mode (npm's `@modelcontextprotocol/inspector`), software
nobody here wrote, against a real server process: it lists our tools, calls each with good
arguments and with bad ones, lists and reads resources and gets a prompt, and sees another
user's data invisible and a wrong token refused.

The Inspector is built on the TypeScript SDK, whose client checks `structuredContent` against the
tool's `outputSchema` on every result, errors included, and throws on a mismatch (the CLI then
exits 1, printing no result). So a call that fails must come back as a result with `isError`
(the CLI prints it and exits 5, `tool_is_error`), never as that exception. The judge is off here:
`run_code` with good arguments is such a failure too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from foundation.version import VERSION
from tests.inspector_support import inspector, run_cli
from tests.mcp_support import FAILS_WITH_THE_JUDGE_OFF, GOOD, McpServer, good_arguments, mcp_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    inspector()  # skip (or fail under CI) before starting anything
    with mcp_server(tmp_path_factory.mktemp("mcp-inspector"), JUDGE_ENABLED="0") as running:
        yield running


TOOL_ERROR = 5  # the CLI's exit code for a result with `isError` (1 is its own failure)


def answer(done: Any) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


def call(server: McpServer, name: str, arguments: dict[str, Any], home: Path) -> dict[str, Any]:
    """One `tools/call` through the Inspector: its result, a success or an `isError` one."""
    done = run_cli(
        server.url,
        server.alice,
        "--method",
        "tools/call",
        "--tool-name",
        name,
        "--tool-args-json",
        json.dumps(arguments),
        home=home,
    )
    assert done.returncode in (0, TOOL_ERROR), f"{name}: the Inspector failed: {done.stderr[-1000:]}"
    result: dict[str, Any] = json.loads(done.stdout)
    assert (done.returncode == TOOL_ERROR) is (result.get("isError") is True), (name, result)
    if done.returncode == TOOL_ERROR:
        assert json.loads(done.stderr)["error"]["code"] == "tool_is_error"
        assert "structuredContent" not in result and result["content"][0]["text"].startswith("Error: ")
    return result


def test_the_inspector_sees_our_name_and_version(server: McpServer, tmp_path: Path) -> None:
    initialized = answer(run_cli(server.url, server.alice, "--method", "initialize", home=tmp_path))
    assert initialized["serverInfo"] == {"name": "orchestrator", "version": VERSION}


def test_the_inspector_lists_our_tools_with_their_hints(server: McpServer, tmp_path: Path) -> None:
    listed = answer(run_cli(server.url, server.alice, "--method", "tools/list", home=tmp_path))
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert {"memory_search", "memory_sql", "read_file", "write_file", "weather", "web_search", "run_code"} <= set(tools)
    assert tools["memory_search"]["annotations"]["readOnlyHint"] is True
    assert tools["write_file"]["annotations"]["destructiveHint"] is True
    assert tools["memory_search"]["inputSchema"]["required"] == ["query"]
    assert "hits" in tools["memory_search"]["outputSchema"]["properties"]
    assert sorted(tools) == sorted(GOOD)


def test_the_inspector_calls_every_tool_with_good_arguments(server: McpServer, tmp_path: Path) -> None:
    task = call(server, "get_ready", {}, tmp_path)["structuredContent"]["tasks"][0]["id"]
    wrong = []
    for name in GOOD:
        result = call(server, name, good_arguments(name, task, server.web.url("/page")), tmp_path)
        if result["isError"] is not (name in FAILS_WITH_THE_JUDGE_OFF):
            wrong.append((name, result))
        elif not result["isError"]:  # the Inspector checked it against the tool's outputSchema
            assert isinstance(result["structuredContent"], dict), (name, result)
        elif FAILS_WITH_THE_JUDGE_OFF[name] is not None:
            assert result["content"][0]["text"].startswith(f"Error: {FAILS_WITH_THE_JUDGE_OFF[name]}: "), result
    assert wrong == []


@pytest.mark.parametrize("name", list(GOOD))
def test_the_inspector_gets_an_error_result_for_bad_arguments(server: McpServer, tmp_path: Path, name: str) -> None:
    result = call(server, name, {**GOOD[name], "no_such_argument": 1}, tmp_path)
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(f"Error: VALIDATION_FAILED: invalid arguments for {name}: ")
    assert "no_such_argument" in result["content"][0]["text"]


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


def test_the_inspector_lists_and_reads_our_resources_and_gets_a_prompt(server: McpServer, tmp_path: Path) -> None:
    """The TypeScript SDK checks each result against MCP's schema: a resource, a template, a
    prompt of ours that did not fit would make the CLI fail (exit 1) instead of printing it."""
    written = ("--method", "tools/call", "--tool-name", "write_file")
    answer(
        run_cli(server.url, server.bob, *written, "--tool-arg", "path=inspect/me.py", "content=x = 1\n", home=tmp_path)
    )
    listed = answer(run_cli(server.url, server.bob, "--method", "resources/list", home=tmp_path))
    assert "file:///inspect/me.py" in [resource["uri"] for resource in listed["resources"]]
    read = answer(
        run_cli(server.url, server.bob, "--method", "resources/read", "--uri", "file:///inspect/me.py", home=tmp_path)
    )
    (content,) = read["contents"]
    assert (content["uri"], content["text"]) == ("file:///inspect/me.py", "x = 1\n")
    assert content["mimeType"].startswith("text/")  # from the machine's MIME table: text/x-python
    templates = answer(run_cli(server.url, server.bob, "--method", "resources/templates/list", home=tmp_path))
    assert len(templates["resourceTemplates"]) == 2
    prompt = ("--method", "prompts/get", "--prompt-name", "review_file", "--prompt-args", "path=inspect/me.py")
    review = answer(run_cli(server.url, server.bob, *prompt, home=tmp_path))
    assert review["messages"][0]["content"]["resource"]["text"] == "x = 1\n"
    refused = run_cli(server.url, server.bob, "--method", "resources/read", "--uri", "file:///../x", home=tmp_path)
    assert refused.returncode != 0 and "not allowed" in refused.stderr
