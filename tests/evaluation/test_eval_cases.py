"""Reading cases: our JSONL format (evaluation/cases.py) and BFCL's files (our own fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.cases import SEVERAL_CALLS_NOTE, CaseFileError, Expectation, load_cases
from tools.catalog import build_registry

ROOT = Path(__file__).resolve().parents[2]
BFCL = ROOT / "tests" / "fixtures" / "bfcl"
EXAMPLES = ROOT / "examples" / "eval" / "cases.jsonl"


def write(path: Path, *lines: object) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def test_our_format_reads_a_tool_case_and_a_chat_case(tmp_path):
    path = write(
        tmp_path / "cases.jsonl",
        "# a comment",
        "",
        {
            "id": "w",
            "messages": [{"role": "user", "content": "Rain in Lyon?"}],
            "expect": {"command": "/Weather", "args": {"place": "Lyon"}, "args_contain": {"place": ["ly"]}},
            "result": "Lyon: 14°C",
            "answer_uses": ["14"],
        },
        {
            "id": "c",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
                {"role": "user", "content": "Capital of Italy?"},
            ],
            "expect": None,
        },
    )
    tool, chat = load_cases(path)
    assert tool.expect == Expectation(command="weather", args={"place": ("Lyon",)}, args_contain={"place": ("ly",)})
    assert tool.result == "Lyon: 14°C" and tool.answer_uses == ("14",) and tool.needs_tool
    assert chat.expect is None and not chat.needs_tool and chat.persona == "You are terse."
    assert chat.messages == (("user", "Hi"), ("assistant", "Hello"), ("user", "Capital of Italy?"))
    assert chat.result is None and chat.source == "cases.jsonl"


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("{not json", ":1: not JSON"),
        ("[1, 2]", "one JSON object"),
        ({"id": "x", "messages": [{"role": "user", "content": "q"}]}, "expect: Field required"),
        ({"id": "x", "messages": [], "expect": None}, "messages"),
        ({"id": "x", "messages": [{"role": "assistant", "content": "a"}], "expect": None}, "the user's"),
        ({"id": "x", "messages": [{"role": "tool", "content": "a"}], "expect": None}, "messages.0.role"),
        ({"id": "x", "messages": [{"role": "user", "content": "q"}], "expect": None, "extra": 1}, "extra"),
    ],
)
def test_our_format_names_the_line_and_the_problem(tmp_path, line, fragment):
    with pytest.raises(CaseFileError) as error:
        load_cases(write(tmp_path / "bad.jsonl", line))
    assert fragment in str(error.value)
    assert "bad.jsonl:1" in str(error.value)


def test_a_missing_file_is_a_case_file_error(tmp_path):
    with pytest.raises(CaseFileError):
        load_cases(tmp_path / "nowhere.jsonl")


def test_the_shipped_cases_cover_every_built_in_command_and_plain_chat():
    cases = load_cases(EXAMPLES)
    expected = {case.expect.command for case in cases if case.expect is not None}
    commands = {tool.command.name for tool in build_registry().commands() if tool.command is not None}
    assert expected == commands
    assert sum(1 for case in cases if case.expect is None) >= 5
    assert len({case.id for case in cases}) == len(cases)


def test_bfcl_simple_expects_one_call_scored_strictly():
    first, second, third = load_cases(BFCL / "BFCL_v4_simple_python.json")
    assert first.expect is not None and first.expect.command == "dates_days_between"
    assert first.expect.strict and first.expect.required == ("start", "end")
    assert first.expect.args["inclusive"] == ("", False)
    assert first.functions[0]["name"] == "dates.days_between"
    assert second.expect is not None and second.expect.args["value"] == (3.5,)
    assert third.persona == "You are a librarian's assistant."
    assert third.messages == (("user", "Find the book Dune by Frank Herbert."),)
    assert "simple_python" in first.source


def test_bfcl_irrelevance_expects_no_call_and_needs_no_answer_file():
    cases = load_cases(BFCL / "BFCL_v4_irrelevance.json")
    assert [case.expect for case in cases] == [None, None]
    assert all(case.functions and case.unsupported is None for case in cases)


def test_bfcl_parallel_cases_are_listed_as_not_supported():
    (case,) = load_cases(BFCL / "BFCL_v4_live_parallel.json")
    assert case.unsupported == SEVERAL_CALLS_NOTE


def test_bfcl_relevance_expects_any_call(tmp_path):
    row = json.loads((BFCL / "BFCL_v4_irrelevance.json").read_text().splitlines()[0])
    (case,) = load_cases(write(tmp_path / "BFCL_v4_live_relevance.json", row))
    assert case.expect == Expectation(command=None)


def test_bfcl_answers_must_be_beside_the_file(tmp_path):
    row = (BFCL / "BFCL_v4_simple_python.json").read_text().splitlines()[0]
    with pytest.raises(CaseFileError, match="possible_answer"):
        load_cases(write(tmp_path / "BFCL_v4_simple_python.json", row))


@pytest.mark.parametrize("name", ["simple_python.json", "BFCL_v4_multi_turn_base.json"])
def test_bfcl_files_need_a_known_category_in_their_name(tmp_path, name):
    row = (BFCL / "BFCL_v4_irrelevance.json").read_text().splitlines()[0]
    with pytest.raises(CaseFileError, match="BFCL"):
        load_cases(write(tmp_path / name, row))
