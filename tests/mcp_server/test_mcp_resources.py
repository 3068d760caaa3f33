"""`/mcp`'s resources, prompts and completions, driven by the official Python SDK client against a
real server process (SPEC 14; `mcp_server/resources.py`, `prompts.py`, `completion.py`).

Two users, alice and bob, each with memories and workspace files: each lists and reads only
their own (another's URI is `NOT_FOUND`, as a missing one), pages through everything once, hits
the read caps with a clear error, gets a clear error for a URI that is not ours, and spends the
`tools` budget on every read, in both protocol eras (`initialize` and `server/discover`).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
import requests
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_server.resources import BLOB_CAP, PAGE_SIZE, TEXT_CAP
from tests.async_support import run_async
from tests.mcp_support import McpServer, mcp_server, session

pytestmark = pytest.mark.slow

FILES = 60  # alice's generated files: with her memories, more than one page


def tool(server: McpServer, token: str, name: str, **arguments: Any) -> dict[str, Any]:
    answer = requests.post(
        f"{server.base_url}/tools/{name}", json=arguments, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    output: dict[str, Any] = answer.json()
    return output


def workspace_of(data_dir: Path, marker: str) -> Path:
    """The workspace directory holding `marker` (the test wrote it with the user's token)."""
    (found,) = [path.parent for path in (data_dir / "workspaces").glob(f"*/{marker}")]
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    tmp = tmp_path_factory.mktemp("mcp-resources")
    with mcp_server(tmp, RATE_LIMITS="tools=10000/minute") as running:
        tool(running, running.alice, "remember", fact="alice keeps the spare key under the mat")
        tool(running, running.alice, "remember", fact="alice drinks green tea every morning")
        tool(running, running.bob, "remember", fact="bob drinks black coffee")
        tool(running, running.alice, "write_file", path="notes/plan.txt", content="step one\nstep two\n")
        tool(running, running.bob, "write_file", path="bob/secret.txt", content="bob's secret\n")
        alice = workspace_of(tmp / "data", "notes")
        for number in range(FILES):
            (alice / "gen").mkdir(exist_ok=True)
            (alice / "gen" / f"file{number:03}.txt").write_text(f"file {number}\n")
        (alice / "big").mkdir()
        (alice / "big" / "text_at_cap.txt").write_text("x" * TEXT_CAP)
        (alice / "big" / "text_over_cap.txt").write_text("x" * (TEXT_CAP + 1))
        (alice / "big" / "blob_at_cap.bin").write_bytes(b"\x00\xff" * (BLOB_CAP // 2))
        (alice / "big" / "blob_over_cap.bin").write_bytes(b"\x00" * (BLOB_CAP + 1))
        yield running


def every_resource(server: McpServer, token: str) -> list[list[types.Resource]]:
    """Every page of `resources/list`, following the cursors."""

    async def scenario() -> list[list[types.Resource]]:
        pages: list[list[types.Resource]] = []
        cursor: str | None = None
        async with session(server.url, token) as client:
            while len(pages) < 20:
                params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
                page = await client.list_resources(params=params)
                pages.append(page.resources)
                cursor = page.next_cursor
                if cursor is None:
                    break
        return pages

    return run_async(scenario)


def read(server: McpServer, token: str, uri: str) -> types.ReadResourceResult | MCPError:
    async def scenario() -> types.ReadResourceResult | MCPError:
        async with session(server.url, token) as client:
            try:
                result = await client.read_resource(uri)
            except MCPError as error:
                return error
            assert isinstance(result, types.ReadResourceResult)
            return result

    return run_async(scenario)


def failure(outcome: types.ReadResourceResult | types.GetPromptResult | MCPError) -> tuple[int, dict[str, Any], str]:
    assert isinstance(outcome, MCPError), outcome
    return outcome.code, outcome.data, outcome.message


def text_of(outcome: types.ReadResourceResult | MCPError) -> str:
    assert isinstance(outcome, types.ReadResourceResult), outcome
    (content,) = outcome.contents
    assert isinstance(content, types.TextResourceContents)
    return content.text


def uris(pages: list[list[types.Resource]]) -> list[str]:
    return [resource.uri for page in pages for resource in page]


def test_capabilities_templates_and_prompts_are_declared(server: McpServer) -> None:
    async def scenario() -> tuple[Any, Any, Any]:
        async with session(server.url, server.alice) as client:
            return (
                client.initialize_result,  # type: ignore[attr-defined]
                await client.list_resource_templates(),
                await client.list_prompts(),
            )

    initialized, templates, prompts = run_async(scenario)
    capabilities = initialized.capabilities
    assert capabilities.resources is not None and not capabilities.resources.subscribe
    assert capabilities.prompts is not None and capabilities.completions is not None
    assert [template.uri_template for template in templates.resource_templates] == [
        "orchestrator://memories/{id}",
        "file:///{+path}",
    ]
    listed = {prompt.name: prompt for prompt in prompts.prompts}
    assert sorted(listed) == ["recall", "review_file"]
    assert [(argument.name, argument.required) for argument in listed["review_file"].arguments] == [
        ("path", True),
        ("focus", False),
    ]
    assert all(prompt.description for prompt in prompts.prompts)


def test_each_user_lists_only_their_own_memories_and_files(server: McpServer) -> None:
    bobs = uris(every_resource(server, server.bob))
    assert bobs[1:] == ["file:///bob/secret.txt"] and bobs[0].startswith("orchestrator://memories/")
    alices = uris(every_resource(server, server.alice))
    assert "file:///notes/plan.txt" in alices and "file:///bob/secret.txt" not in alices
    assert bobs[0] not in alices
    assert text_of(read(server, server.bob, bobs[0])) == "bob drinks black coffee"


def test_another_users_memory_or_file_is_not_found_like_a_missing_one(server: McpServer) -> None:
    alices_memory = uris(every_resource(server, server.alice))[0]
    assert text_of(read(server, server.alice, alices_memory)) == "alice drinks green tea every morning"
    code, data, message = failure(read(server, server.bob, alices_memory))
    assert (code, data["code"], data["uri"]) == (types.INVALID_PARAMS, "NOT_FOUND", alices_memory)
    assert "green tea" not in message
    missing = failure(read(server, server.bob, "orchestrator://memories/999999"))
    assert missing[0] == code and missing[1]["code"] == "NOT_FOUND"
    assert text_of(read(server, server.alice, "file:///notes/plan.txt")) == "step one\nstep two\n"
    code, data, _ = failure(read(server, server.alice, "file:///bob/secret.txt"))
    assert (code, data["code"]) == (types.INVALID_PARAMS, "NOT_FOUND")


def test_paging_visits_every_resource_once_memories_first(server: McpServer) -> None:
    pages = every_resource(server, server.alice)
    assert len(pages) == 2 and [len(page) for page in pages] == [PAGE_SIZE, 2 + 1 + FILES + 4 - PAGE_SIZE]
    listed = uris(pages)
    assert len(listed) == len(set(listed))
    assert listed[:2] == sorted(listed[:2], reverse=True) and all(uri.startswith("orchestrator:") for uri in listed[:2])
    paths = [uri.removeprefix("file:///") for uri in listed[2:]]
    assert paths == sorted(paths) and len(paths) == FILES + 5
    first = pages[0][0]
    assert first.mime_type == "text/plain" and first.title == "alice drinks green tea every morning"


def test_a_cursor_not_given_by_the_server_is_a_clear_error(server: McpServer) -> None:
    async def scenario() -> MCPError:
        async with session(server.url, server.alice) as client:
            with pytest.raises(MCPError) as raised:
                await client.list_resources(params=types.PaginatedRequestParams(cursor="not-ours"))
            return raised.value

    error = run_async(scenario)
    assert error.code == types.INVALID_PARAMS and error.data["code"] == "VALIDATION_FAILED"
    assert "list from the start" in error.message


def test_reads_are_capped_with_a_clear_error(server: McpServer) -> None:
    assert text_of(read(server, server.alice, "file:///big/text_at_cap.txt")) == "x" * TEXT_CAP
    code, data, message = failure(read(server, server.alice, "file:///big/text_over_cap.txt"))
    assert (code, data["code"], data["limit_bytes"], data["size"]) == (
        types.INVALID_PARAMS,
        "VALIDATION_FAILED",
        TEXT_CAP,
        TEXT_CAP + 1,
    )
    assert "read_file" in message
    blob = read(server, server.alice, "file:///big/blob_at_cap.bin")
    assert isinstance(blob, types.ReadResourceResult)
    (content,) = blob.contents
    assert isinstance(content, types.BlobResourceContents) and content.mime_type == "application/octet-stream"
    assert base64.b64decode(content.blob) == b"\x00\xff" * (BLOB_CAP // 2)
    code, data, _ = failure(read(server, server.alice, "file:///big/blob_over_cap.bin"))
    assert (data["code"], data["limit_bytes"]) == ("VALIDATION_FAILED", BLOB_CAP)


@pytest.mark.parametrize(
    ("uri", "code", "says"),
    [
        ("https://example.com/notes.txt", "NOT_FOUND", "not a resource of this server"),
        ("orchestrator://memories/abc", "NOT_FOUND", "positive integer"),
        ("orchestrator://tasks/1", "NOT_FOUND", "orchestrator://memories/{id}"),
        ("file:///", "NOT_FOUND", "the workspace itself"),
        ("file:///notes/plan.txt?x=1", "NOT_FOUND", "query or fragment"),
        ("file:///../../etc/passwd", "PERMISSION_DENIED", "'..' is not allowed"),
        ("file:////etc/passwd", "PERMISSION_DENIED", "absolute paths are not allowed"),
        ("file:///notes/none.txt", "NOT_FOUND", "there is no file notes/none.txt"),
        ("file:///notes", "VALIDATION_FAILED", "is a directory"),
    ],
)
def test_a_bad_uri_is_a_clear_error_with_its_code(server: McpServer, uri: str, code: str, says: str) -> None:
    number, data, message = failure(read(server, server.alice, uri))
    assert (number, data["code"], data["uri"]) == (types.INVALID_PARAMS, code, uri)
    assert says in message


def test_recall_embeds_the_users_own_matching_memories(server: McpServer) -> None:
    async def scenario(token: str) -> types.GetPromptResult:
        async with session(server.url, token) as client:
            result = await client.get_prompt("recall", {"topic": "drinks"})
            assert isinstance(result, types.GetPromptResult)
            return result

    alices = run_async(scenario, server.alice)
    embedded = [message.content for message in alices.messages if isinstance(message.content, types.EmbeddedResource)]
    assert [item.resource.text for item in embedded] == ["alice drinks green tea every morning"]  # type: ignore[union-attr]
    assert embedded[0].resource.uri.startswith("orchestrator://memories/")
    assert isinstance(alices.messages[-1].content, types.TextContent) and "drinks" in alices.messages[-1].content.text
    bobs = run_async(scenario, server.bob)
    assert "green tea" not in bobs.model_dump_json() and "black coffee" in bobs.model_dump_json()


def test_review_file_embeds_the_file_and_refuses_bad_arguments(server: McpServer) -> None:
    async def scenario(name: str, arguments: dict[str, str]) -> types.GetPromptResult | MCPError:
        async with session(server.url, server.alice) as client:
            try:
                result = await client.get_prompt(name, arguments)
            except MCPError as error:
                return error
            assert isinstance(result, types.GetPromptResult)
            return result

    review = run_async(scenario, "review_file", {"path": "notes/plan.txt", "focus": "naming"})
    assert isinstance(review, types.GetPromptResult)
    first, request = review.messages
    assert isinstance(first.content, types.EmbeddedResource)
    assert first.content.resource.uri == "file:///notes/plan.txt"
    assert first.content.resource.text == "step one\nstep two\n"  # type: ignore[union-attr]
    assert isinstance(request.content, types.TextContent) and "naming" in request.content.text
    code, data, _ = failure(run_async(scenario, "review_file", {}))
    assert (code, data["code"], [field["field"] for field in data["fields"]]) == (
        types.INVALID_PARAMS,
        "VALIDATION_FAILED",
        ["path"],
    )
    assert failure(run_async(scenario, "review_file", {"path": "bob/secret.txt"}))[1]["code"] == "NOT_FOUND"
    assert failure(run_async(scenario, "no_such_prompt", {}))[1]["code"] == "NOT_FOUND"


def test_completion_offers_the_users_own_paths(server: McpServer) -> None:
    async def scenario(token: str, ref: Any, value: str) -> types.Completion:
        async with session(server.url, token) as client:
            return (await client.complete(ref, {"name": "path", "value": value})).completion

    prompt = types.PromptReference(name="review_file")
    assert run_async(scenario, server.alice, prompt, "notes/").values == ["notes/plan.txt"]
    assert run_async(scenario, server.bob, prompt, "notes/").values == []
    many = run_async(scenario, server.alice, types.ResourceTemplateReference(uri="file:///{+path}"), "gen/")
    assert many.values[:2] == ["gen/file000.txt", "gen/file001.txt"] and many.total == FILES
    assert run_async(scenario, server.alice, types.PromptReference(name="recall"), "x").values == []


def test_every_read_spends_the_tools_budget(tmp_path: Path) -> None:
    with mcp_server(tmp_path, RATE_LIMITS="tools=2/minute") as server:

        async def scenario() -> list[Any]:
            async with session(server.url, server.alice) as client:
                outcomes: list[Any] = [await client.list_resources()]
                outcomes.append(
                    await client.complete(types.PromptReference(name="review_file"), {"name": "path", "value": ""})
                )
                try:
                    outcomes.append(await client.read_resource("file:///anything.txt"))
                except MCPError as error:
                    outcomes.append(error)
                outcomes.append(await client.list_prompts())  # holds no user data: free
                return outcomes

        listed, completed, refused, prompts = run_async(scenario)
        assert listed.resources == [] and completed.completion.values == []
        assert isinstance(refused, MCPError) and refused.data["code"] == "rate_limited"
        assert refused.data["limit"] == "tools" and refused.data["retry_after_s"] >= 1
        assert len(prompts.prompts) == 2


def test_the_2026_07_28_era_reads_the_same_way(server: McpServer) -> None:
    """`server/discover` (stateless, revision 2026-07-28) instead of `initialize`: the same
    resources, the same errors, and results marked private to the user (`cacheScope`)."""

    async def scenario() -> tuple[str | None, types.ReadResourceResult, MCPError]:
        headers = {"Authorization": f"Bearer {server.bob}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60)) as http,
            streamable_http_client(server.url, http_client=http) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream) as client,
        ):
            await client.discover()
            read = await client.read_resource("file:///bob/secret.txt")
            assert isinstance(read, types.ReadResourceResult)
            with pytest.raises(MCPError) as raised:
                await client.read_resource("file:///notes/plan.txt")  # alice's
            return client.protocol_version, read, raised.value

    version, read, refused = run_async(scenario)
    assert version == "2026-07-28" and read.cache_scope == "private"
    assert text_of(read) == "bob's secret\n"
    assert refused.code == types.INVALID_PARAMS and refused.data["code"] == "NOT_FOUND"
