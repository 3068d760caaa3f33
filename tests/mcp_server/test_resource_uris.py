"""`mcp_server/resource_uris.py` and the list cursor of `mcp_server/resources.py`: pure values,
no server (the SDK-driven tests are `test_mcp_resources.py`)."""

from __future__ import annotations

import pytest

from mcp_server.resource_uris import FileRef, MemoryRef, UriProblem, file_uri, memory_uri, parse_uri
from mcp_server.resources import FIRST_PAGE, Cursor, Problem, decode_cursor


@pytest.mark.parametrize("path", ["notes/plan.txt", "plan v2.txt", "été/über ß.md", "a%20b.txt", "deep/er/still/file"])
def test_a_file_uri_names_the_path_it_was_made_from(path: str) -> None:
    assert parse_uri(file_uri(path)) == FileRef(path)


def test_a_memory_uri_names_its_id() -> None:
    assert memory_uri(42) == "orchestrator://memories/42"
    assert parse_uri(memory_uri(42)) == MemoryRef(42)


@pytest.mark.parametrize(
    "uri",
    [
        "",
        "notes/plan.txt",
        "https://example.com/x",
        "file://otherhost/x",
        "file:///",
        "file:///x#frag",
        "orchestrator://memories/",
        "orchestrator://memories/-1",
        "orchestrator://memories/1/2",
        "orchestrator://memories/١٢",  # Arabic-Indic digits: isdigit() but not an id
        "orchestrator://memories/" + "9" * 19,
        "orchestrator://people/1",
        "file:///" + "a" * 3000,
    ],
)
def test_anything_else_is_a_problem_naming_the_templates(uri: str) -> None:
    problem = parse_uri(uri)
    assert isinstance(problem, UriProblem)
    assert "resources/templates/list" in problem.message


def test_a_cursor_round_trips_and_a_foreign_one_is_a_problem() -> None:
    cursor = Cursor(part="files", after_path="gen/file049.txt")
    assert decode_cursor(cursor.encode()) == cursor
    assert decode_cursor(None) == FIRST_PAGE
    for foreign in ("not-ours", "e30=", Cursor(part="memories").encode()[:-2] + "!!", "x" * 2000):
        problem = decode_cursor(foreign)
        assert isinstance(problem, Problem) and problem.code == "VALIDATION_FAILED", foreign
