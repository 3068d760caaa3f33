"""`/mcp` driven by the official MCP client SDK against a real server process (SPEC 14).

One server for the module (alice, the admin, and bob): the tool list derived from the tools'
own models and hints, each tool family called with `structuredContent` back, one user's
memories and files invisible to the other, a wrong token refused before the SDK, and a
failed call as an `isError` result with its code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import requests

from foundation.version import VERSION
from judge.service import Judge
from tests.async_support import run_async
from tests.judge_support import require_judge
from tests.mcp_support import McpServer, error_of, mcp_server, session, structured
from tools.catalog import build_registry

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    with mcp_server(tmp_path_factory.mktemp("mcp")) as running:
        yield running


def test_tools_list_is_derived_from_each_tools_models_and_hints(server: McpServer) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with session(server.url, server.alice) as client:
            return client.initialize_result, await client.list_tools()  # type: ignore[attr-defined]

    initialized, listed = run_async(scenario)
    assert initialized.server_info.name == "orchestrator" and initialized.server_info.version == VERSION
    served = [tool for tool in build_registry() if tool.annotations is not None]
    assert [tool.name for tool in listed.tools] == [tool.name for tool in served]
    assert {"ask_choice", "image_analyze", "imagine"}.isdisjoint(tool.name for tool in listed.tools)
    for ours, theirs in zip(served, listed.tools, strict=True):
        assert theirs.description == ours.description
        assert theirs.input_schema == ours.input_model.model_json_schema()
        assert theirs.output_schema == ours.output_model.model_json_schema(mode="serialization")
        hints = ours.annotations
        assert hints is not None and theirs.annotations is not None
        assert theirs.annotations.read_only_hint is hints.read_only
        assert theirs.annotations.destructive_hint is hints.destructive
        assert theirs.annotations.idempotent_hint is hints.idempotent
        assert theirs.annotations.open_world_hint is hints.open_world
    by_name = {tool.name: tool.annotations for tool in listed.tools}
    assert by_name["memory_search"].read_only_hint is True  # type: ignore[union-attr]
    assert by_name["write_file"].read_only_hint is False  # type: ignore[union-attr]
    assert by_name["write_file"].destructive_hint is True  # type: ignore[union-attr]
    assert by_name["web_search"].open_world_hint is True  # type: ignore[union-attr]


def test_each_tool_family_answers_structured_content(server: McpServer) -> None:
    async def scenario() -> dict[str, Any]:
        async with session(server.url, server.alice) as client:
            calls = {
                "remember": ("remember", {"fact": "alice drinks green tea"}),
                "memory_search": ("memory_search", {"query": "green tea"}),
                "memory_sql": ("memory_sql", {"sql": "SELECT content FROM memories"}),
                "write_file": ("write_file", {"path": "notes/plan.txt", "content": "step one\nstep two\n"}),
                "edit_file": (
                    "edit_file",
                    {"path": "notes/plan.txt", "edits": "<<<<<<< SEARCH\nstep two\n=======\nstep 2\n>>>>>>> REPLACE"},
                ),
                "read_file": ("read_file", {"path": "notes/plan.txt"}),
                "list_files": ("list_files", {}),
                "search_files": ("search_files", {"pattern": "step 2"}),
                "weather": ("weather", {"place": "Paris"}),
                "web_search": ("web_search", {"query": "mars rover"}),
                "get_ready": ("get_ready", {}),
            }
            results = {key: await client.call_tool(name, arguments) for key, (name, arguments) in calls.items()}
            task_id = structured(results["get_ready"])["tasks"][0]["id"]
            learner = {
                "show_task": ("show_task", {"task_id": task_id}),
                "start_task": ("start_task", {"task_id": task_id}),
                "add_comment": ("add_comment", {"task_id": task_id, "text": "alice's note"}),
                "get_comments": ("get_comments", {"task_id": task_id}),
                "get_context": ("get_context", {"task_id": task_id}),
                "submit_unknown": ("submit", {"task_id": "no-such-task", "answer": "x"}),
            }
            for key, (name, arguments) in learner.items():
                results[key] = await client.call_tool(name, arguments)
            return results

    results = run_async(scenario)
    for key, result in results.items():
        if key == "submit_unknown":
            continue
        assert result.is_error is False, (key, result)
        assert result.content[0].type == "text" and result.content[0].text
    assert structured(results["remember"])["content"] == "alice drinks green tea"
    assert structured(results["memory_search"])["hits"][0]["source"] == "memory"
    assert "alice drinks green tea" in results["memory_sql"].content[0].text
    assert "step 2" in structured(results["read_file"])["content"]
    assert [entry["path"] for entry in structured(results["list_files"])["files"]] == ["notes/plan.txt"]
    assert structured(results["search_files"])["matches"]
    assert structured(results["weather"])["place"].startswith("Paris")
    assert structured(results["web_search"])["results"][0]["url"] == "https://en.wikipedia.org/wiki/Mars_rover"
    assert any(request.path.startswith("/search?q=mars+rover") for request in server.web.requests)
    assert structured(results["get_ready"])["total_ready"] >= 1
    assert structured(results["start_task"])["task_id"] == structured(results["show_task"])["id"]
    assert [comment["text"] for comment in structured(results["get_comments"])["comments"]] == ["alice's note"]
    unknown = results["submit_unknown"]
    assert error_of(unknown)["code"] in ("NOT_FOUND", "VALIDATION_FAILED")


def test_one_users_memories_files_and_comments_are_invisible_to_another(server: McpServer) -> None:
    async def scenario() -> dict[str, Any]:
        async with session(server.url, server.alice) as alice:
            await alice.call_tool("remember", {"fact": "alice's secret is 4711"})
            await alice.call_tool("write_file", {"path": "secret.txt", "content": "4711"})
            task_id = structured(await alice.call_tool("get_ready", {}))["tasks"][0]["id"]
            await alice.call_tool("add_comment", {"task_id": task_id, "text": "alice's private 4711"})
        async with session(server.url, server.bob) as bob:
            return {
                "comments": await bob.call_tool("get_comments", {"task_id": task_id}),
                "search": await bob.call_tool("memory_search", {"query": "4711"}),
                "sql": await bob.call_tool("memory_sql", {"sql": "SELECT count(*) AS n FROM memories"}),
                "read": await bob.call_tool("read_file", {"path": "secret.txt"}),
                "list": await bob.call_tool("list_files", {}),
                "grep": await bob.call_tool("search_files", {"pattern": "4711"}),
            }

    seen = run_async(scenario)
    assert structured(seen["search"])["hits"] == []
    assert structured(seen["sql"])["rows"] == [[0]]
    assert error_of(seen["read"])["code"] == "NOT_FOUND"
    assert structured(seen["list"])["files"] == []
    assert structured(seen["grep"])["matches"] == []
    assert all("4711" not in comment["text"] for comment in structured(seen["comments"])["comments"])


def test_a_failed_call_is_an_error_result_with_its_code_and_fields(server: McpServer) -> None:
    async def scenario() -> Any:
        async with session(server.url, server.alice) as client:
            return await client.call_tool("memory_search", {"query": "x", "bogus": 1})

    result = run_async(scenario)
    error = error_of(result)
    assert error["code"] == "VALIDATION_FAILED"
    assert [problem["field"] for problem in error["details"]] == ["bogus"]
    assert result.content[0].text.startswith("Error: VALIDATION_FAILED: ")


def test_an_unknown_or_unserved_tool_is_a_protocol_error(server: McpServer) -> None:
    async def scenario(name: str) -> str:
        async with session(server.url, server.alice) as client:
            try:
                await client.call_tool(name, {})
            except Exception as error:  # the SDK raises the JSON-RPC error
                return str(error)
            return "no error"

    assert "unknown tool 'no_such_tool'" in run_async(scenario, "no_such_tool")
    assert "unknown tool 'ask_choice'" in run_async(scenario, "ask_choice")  # a widget is not served


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")  # the client warns too (2026-07-28)
def test_logging_is_declared_and_any_level_accepted(server: McpServer) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with session(server.url, server.alice) as client:
            return client.initialize_result, await client.set_logging_level("debug")  # type: ignore[attr-defined]

    initialized, answered = run_async(scenario)
    assert initialized.capabilities.logging is not None
    assert answered.model_dump(exclude_none=True) == {}


@pytest.mark.parametrize("header", [None, "Bearer not-a-token", "Basic YWxpY2U6eA=="])
def test_a_missing_or_wrong_token_is_401_with_a_bearer_challenge(server: McpServer, header: str | None) -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if header is not None:
        headers["Authorization"] = header
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    answer = requests.post(server.url, json=ping, headers=headers, timeout=10)
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith("Bearer ")
    assert ('error="invalid_token"' in answer.headers["WWW-Authenticate"]) is (header == "Bearer not-a-token")
    assert answer.json()["error"]["code"] == "unauthorized"


def test_the_sdk_client_with_a_wrong_token_fails_to_initialize(server: McpServer) -> None:
    async def scenario() -> None:
        async with session(server.url, "wrong"):
            pass

    with pytest.raises(BaseException) as raised:
        run_async(scenario)
    assert "401" in repr(raised.value) or isinstance(raised.value, httpx2.HTTPStatusError | BaseExceptionGroup)


def test_the_rate_budget_is_spent_and_refused_like_post_tools(tmp_path) -> None:
    with mcp_server(tmp_path, RATE_LIMITS="tools=3/minute") as server:

        async def scenario() -> list[Any]:
            async with session(server.url, server.alice) as client:
                return [await client.call_tool("list_files", {}) for _ in range(3)]

        assert [result.is_error for result in run_async(scenario)] == [False, False, False]

        async def over() -> Any:
            async with session(server.url, server.alice) as client:
                return await client.call_tool("memory_search", {"query": "x"})

        refused = run_async(over)
        error = error_of(refused)
        assert error["code"] == "rate_limited" and error["details"]["limit"] == "tools"
        assert error["details"]["retry_after_s"] >= 1
        # the budget is the one POST /tools/<name> spends: spent over /mcp, refused over HTTP too
        auth = {"Authorization": f"Bearer {server.alice}"}
        http = requests.post(f"{server.base_url}/tools/list_files", json={}, headers=auth, timeout=10)
        assert http.status_code == 429 and http.json()["error"]["code"] == "rate_limited"

        # and bob's budget is his own
        async def bobs() -> Any:
            async with session(server.url, server.bob) as client:
                return await client.call_tool("list_files", {})

        assert run_async(bobs).is_error is False


def test_openapi_documents_mcp_beside_the_routes(server: McpServer) -> None:
    document = requests.get(f"{server.base_url}/openapi.json", timeout=10).json()
    operation = document["paths"]["/mcp"]["post"]
    assert operation["tags"] == ["mcp"] and operation["security"] == [{"bearerAuth": []}]
    assert operation["requestBody"]["content"]["application/json"]["schema"]["required"] == ["jsonrpc", "method"]
    assert {"200", "400", "401", "413", "415"} <= set(operation["responses"])
    assert "/tools/memory_search" in document["paths"]  # the routes are still there


def test_run_code_runs_in_the_judge(tmp_path) -> None:
    """The judge family: skipped where Docker is not there, failed under JUDGE_REQUIRED=1 (CI)."""
    judge = Judge.from_env()
    ready = judge.available()
    judge.close()
    require_judge(*ready)
    with mcp_server(tmp_path, JUDGE_ENABLED="1") as server:

        async def scenario() -> Any:
            async with session(server.url, server.alice) as client:
                return await client.call_tool("run_code", {"language": "python", "code": "print(6 * 7)"})

        result = run_async(scenario)
        assert result.is_error is False, result
        output = structured(result)
        assert output["status"] == "ok" and output["stdout"] == "42\n" and output["exit_code"] == 0


def test_sigterm_after_mcp_calls_stops_the_sdk_and_exits_0(tmp_path) -> None:
    """The SDK's task group is the ASGI lifespan's: started with the server, stopped at shutdown."""
    with mcp_server(tmp_path) as server:

        async def scenario() -> Any:
            async with session(server.url, server.alice) as client:
                return await client.call_tool("list_files", {})

        assert run_async(scenario).is_error is False
        server.process.terminate()
        assert server.process.wait(timeout=30) == 0
        log = server.log.read_text()
        assert log.index("session manager started") < log.index("session manager shutting down")
