"""The eval end to end against the real llama.cpp server with SmolLM2-135M (CI's model): it runs
and reports on our own case set, and with the grammar on every command the model wrote is a
command line the detector reads that names a command of the list. A 135M model's accuracy is
never asserted: the rates are whatever it scores."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cli.eval import register
from config.settings import Settings
from tests.llama_support import LlamaServer

pytestmark = [pytest.mark.slow, pytest.mark.llm]

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "examples" / "eval" / "cases.jsonl"
BFCL = ROOT / "tests" / "fixtures" / "bfcl"
LIMIT = "2"  # 2 cases x 4 options, some with a second pass


def run_eval(server: LlamaServer, *args: str) -> dict[str, object]:
    # greedy: the grid of demonstrations and grammar (the decision by mass: tests/llm/test_decide_real.py)
    settings = Settings(
        llm_provider="openai",
        llm_base_url=server.base_url,
        llm_model=server.model,
        llm_timeout_s=120,
        llm_decide="greedy",
        llm_max_tokens=128,  # the first lines are what is checked; a long second answer cost minutes
    )
    group = click.Group()
    register(group, lambda: settings)
    result = CliRunner().invoke(group, ["eval", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output + server.log_tail()
    report: dict[str, object] = json.loads(result.stdout)
    return report


def test_our_cases_run_and_report_and_the_grammar_keeps_commands_well_formed(llama_server: LlamaServer):
    report = run_eval(llama_server, str(CASES), "--compare", "--limit", LIMIT)
    cards = report["cards"]
    assert isinstance(cards, list)
    assert [(c["option"]["demos"], c["option"]["grammar"], c["option"]["decide"]) for c in cards] == [
        (True, False, "greedy"),
        (True, True, "greedy"),
        (False, False, "greedy"),
        (False, True, "greedy"),
    ]
    for found in cards:
        assert found["cases"] == int(LIMIT) and found["failures"] == 0
        assert found["right_tool"]["total"] == int(LIMIT)  # the first cases all need a tool
        assert found["ttft_ms"] is not None and found["ttft_ms"] > 0
    cases = report["cases"]
    assert isinstance(cases, list)
    for case in (c for c in cases if "grammar on" in c["option"]):
        reply = case["reply"]
        assert reply is not None
        if reply.lstrip().startswith("/"):
            assert case["call"] is not None, reply
            assert case["call"]["offered"], reply  # the grammar allows only the list's commands
        else:
            assert case["call"] is None


def test_a_bfcl_fixture_runs_and_reports(llama_server: LlamaServer):
    report = run_eval(llama_server, str(BFCL / "BFCL_v4_simple_python.json"), str(BFCL / "BFCL_v4_irrelevance.json"))
    for found in report["cards"]:  # type: ignore[attr-defined]
        assert found["cases"] == 5 and found["failures"] == 0
        assert found["right_tool"]["total"] == 3 and found["false_commands"]["total"] == 2
