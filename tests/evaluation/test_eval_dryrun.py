"""Tools in dry-run (evaluation/dryrun.py): the real binding and validation, a canned result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commands.detect import detect_command
from evaluation.cases import load_cases
from evaluation.dryrun import DRY_RUN_ROLE, NO_RESULT, dry_context, dry_run_registry, function_registry, json_schema
from evaluation.run import read_call
from tools.base import ErrorCode
from tools.catalog import build_registry

BFCL = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "bfcl"


@pytest.fixture(scope="module")
def tools():
    return build_registry()


def call(registry, reply: str):
    command = detect_command(reply)
    assert command is not None
    return read_call(command, registry, dry_context())


def test_every_tool_keeps_its_binding_model_and_role(tools):
    dry = dry_run_registry(tools, "canned")
    assert [tool.name for tool in dry] == [tool.name for tool in tools]
    for real, fake in zip(tools, dry, strict=True):
        assert fake.command == real.command and fake.input_model is real.input_model
        assert (fake.result_role, fake.needs, fake.interactive) == (real.result_role, real.needs, real.interactive)


def test_a_valid_command_gets_the_canned_result_and_its_validated_input(tools):
    found, routed = call(dry_run_registry(tools, "Lyon: 14°C"), "/search_files def main *.py")
    assert found.well_formed and found.args == {"pattern": "def main", "file_glob": "*.py"}
    assert routed.result.ok and routed.result.text == "Lyon: 14°C" and routed.role == "file_tools"


def test_nothing_is_executed(tools, tmp_path):
    found, routed = call(dry_run_registry(tools, None), f"/write_file {tmp_path}/x.txt\nhello")
    assert found.well_formed and routed.result.text == NO_RESULT
    assert not any(tmp_path.iterdir())


def test_arguments_the_input_model_rejects_are_refused_with_the_usage(tools):
    found, routed = call(dry_run_registry(tools, "x"), "/run_code cobol\nDISPLAY 'HI'.")
    assert not found.well_formed and found.offered and found.args is None
    assert routed.result.error_code == ErrorCode.VALIDATION_FAILED and "Usage: /run_code" in routed.result.hint


def test_an_unknown_command_is_the_routers_error(tools):
    found, routed = call(dry_run_registry(tools, "x"), "/wether Lyon")
    assert not found.offered and not found.well_formed
    assert routed.role == "router_tools" and routed.result.error_code == ErrorCode.UNKNOWN_COMMAND


def test_bfcl_types_become_json_schema():
    schema = {
        "type": "dict",
        "properties": {
            "a": {"type": "float", "optional": True},
            "b": {"type": "tuple", "items": {"type": "dict", "properties": {"c": {"type": "any", "description": "d"}}}},
            "e": {"type": "array", "items": {"type": "float"}, "default": [1]},
        },
        "required": ["a"],
    }
    assert json_schema(schema) == {
        "type": "object",
        "properties": {
            "a": {"type": "number"},
            "b": {"type": "array", "items": {"type": "object", "properties": {"c": {"description": "d"}}}},
            "e": {"type": "array", "items": {"type": "number"}, "default": [1]},
        },
        "required": ["a"],
    }


def test_bfcl_functions_become_commands_through_the_generic_binding():
    _, second, third = load_cases(BFCL / "BFCL_v4_simple_python.json")
    registry = function_registry(second.functions, None)
    (tool,) = list(registry)
    assert tool.command is not None and tool.command.name == "convert_length" and tool.result_role == DRY_RUN_ROLE
    found, routed = call(registry, '/convert_length {"value": 3.5, "from_unit": "km", "to_unit": "mi"}')
    assert found.args == {"value": 3.5, "from_unit": "km", "to_unit": "mi"} and routed.result.ok
    found, _ = call(registry, '/convert_length {"value": "3.5", "from_unit": "km", "to_unit": "mi"}')
    assert not found.well_formed and "value" in found.problem
    nested = function_registry(third.functions, None)
    found, _ = call(nested, "/library_find_book Dune")  # its one required string is the argument text
    assert found.args == {"title": "Dune"}


def test_one_required_string_is_the_argument_text(tmp_path):
    row = {
        "id": "irrelevance_0",
        "question": [[{"role": "user", "content": "q"}]],
        "function": [
            {
                "name": "stock.price",
                "description": "A price.",
                "parameters": {"type": "dict", "properties": {"symbol": {"type": "string"}}, "required": ["symbol"]},
            }
        ],
    }
    path = tmp_path / "BFCL_v4_irrelevance.json"
    path.write_text(json.dumps(row) + "\n")
    (case,) = load_cases(path)
    found, _ = call(function_registry(case.functions, None), "/stock_price AAPL")
    assert found.args == {"symbol": "AAPL"}
