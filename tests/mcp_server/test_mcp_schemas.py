"""Every `/mcp` result is valid for every host: its `structuredContent`, when present, validates
against the tool's declared `outputSchema` (MCP 2025-11-25, tools: "Servers MUST provide
structured results that conform to this schema"), errors included, checked with `jsonschema`
on the raw JSON-RPC answers of a real server process.

Hosts built on the TypeScript SDK (the MCP Inspector, desktop and editor hosts) validate
`structuredContent` even when `isError` is true, and throw on a mismatch; the Python SDK does
not, so this test reads the wire. Each tool our server lists is called with good arguments (a
failure is still checked: `run_code` with the judge off, a missing file) and with bad ones (an
argument it does not take, every argument of the wrong type): a success carries valid
structured content, a failure carries `isError`, the `Error:` line and no `structuredContent`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from jsonschema import Draft202012Validator

from foundation.version import VERSION
from tests.mcp_support import FAILS_WITH_THE_JUDGE_OFF, GOOD, McpServer, good_arguments, mcp_server

pytestmark = pytest.mark.slow

HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
#: well-formed arguments a tool refuses: more failures to check
REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "no/such/file.txt"}),
    ("read_file", {"path": "../../etc/passwd"}),
    ("show_task", {"task_id": "no-such-task"}),
    ("submit", {"task_id": "no-such-task", "answer": "x"}),
    ("memory_sql", {"sql": "DROP TABLE memories"}),
    ("open_url", {"url": "http://127.0.0.1:9/closed"}),
    ("edit_file", {"path": "notes/plan.txt", "edits": "not an edit block"}),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    limits = "tools=off,turns=off,runs=off"  # some 60 calls: no budget gets in the way
    with mcp_server(tmp_path_factory.mktemp("mcp-schemas"), JUDGE_ENABLED="0", RATE_LIMITS=limits) as running:
        yield running


def rpc(server: McpServer, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One JSON-RPC request to `/mcp` as alice; the raw answer (a `result` or an `error`)."""
    headers = {**HEADERS, "Authorization": f"Bearer {server.alice}", "MCP-Protocol-Version": "2025-11-25"}
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer = requests.post(server.url, json=message, headers=headers, timeout=120)
    assert answer.status_code == 200, answer.text[:500]
    parsed: dict[str, Any] = answer.json()
    return parsed


def call(server: McpServer, name: str, arguments: Any) -> dict[str, Any]:
    answer = rpc(server, "tools/call", {"name": name, "arguments": arguments})
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def problems(result: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """What makes `result` invalid for a host that checks it against the tool's `outputSchema`."""
    structured = result.get("structuredContent")
    if structured is None:
        return [] if result.get("isError") else ["a success without structuredContent, though the tool has a schema"]
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    return [
        f"/{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(structured)
    ]


def wrong_types(schema: dict[str, Any]) -> dict[str, Any]:
    """Every argument the tool takes, given a value no argument of ours accepts (a list of lists)."""
    return {name: [[1]] for name in schema.get("properties", {})}


def test_every_result_of_every_tool_validates_against_its_output_schema(server: McpServer) -> None:
    listed = {tool["name"]: tool for tool in rpc(server, "tools/list", {})["result"]["tools"]}
    assert sorted(listed) == sorted(GOOD)
    assert all(tool["outputSchema"]["type"] == "object" for tool in listed.values())
    task = call(server, "get_ready", {})["structuredContent"]["tasks"][0]["id"]
    page = server.web.url("/page")
    invalid: list[str] = []
    outcomes: dict[tuple[str, str], dict[str, Any]] = {}

    def check(name: str, kind: str, arguments: Any) -> dict[str, Any]:
        result = call(server, name, arguments)
        invalid.extend(
            f"{name} ({kind} {arguments}): {problem}" for problem in problems(result, listed[name]["outputSchema"])
        )
        outcomes[(name, kind)] = result
        return result

    for name in GOOD:
        check(name, "good", good_arguments(name, task, page))
    for name, tool in listed.items():
        check(name, "extra argument", {**GOOD[name], "no_such_argument": 1} if name != "open_url" else {"nope": 1})
        check(name, "wrong types", wrong_types(tool["inputSchema"]))
    for name, arguments in REFUSED:
        check(name, "refused", arguments)
    assert invalid == [], "\n".join(invalid)

    for (name, kind), result in outcomes.items():
        failed = bool(result.get("isError"))
        expected = kind != "good" or name in FAILS_WITH_THE_JUDGE_OFF
        assert failed is expected, (name, kind, result)
        if failed:  # ours leave structuredContent out, and say the error in text
            assert "structuredContent" not in result, (name, kind, result)
            error = json.loads(result["content"][1]["text"])["error"]
            assert result["content"][0]["text"] == f"Error: {error['code']}: {error['message']}"
            if kind in ("extra argument", "wrong types"):
                assert error["code"] == "VALIDATION_FAILED", (name, kind, error)
                assert error["details"], (name, kind, error)
            if kind == "good" and FAILS_WITH_THE_JUDGE_OFF[name] is not None:
                assert error["code"] == FAILS_WITH_THE_JUDGE_OFF[name], (name, error)


def test_an_unknown_tool_is_a_protocol_error_not_a_result(server: McpServer) -> None:
    answer = rpc(server, "tools/call", {"name": "no_such_tool", "arguments": {}})
    assert "result" not in answer and answer["error"]["code"] == -32602


def test_server_info_names_the_products_version(server: McpServer) -> None:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}
    info = rpc(server, "initialize", params)["result"]["serverInfo"]
    assert info == {"name": "orchestrator", "version": VERSION} and VERSION
