"""Issue 33 against the real SmolLM2-135M on llama.cpp's server (CI's model, log-probabilities on):
the decision by mass turns a plain question the greedy text makes a command into prose, its reads
and the pass keep the server's prefix cache, the eval is repeatable at temperature 0, and
`--native` reports native function calling next to our text protocol.

The questions below were found by measurement (`bench/cards.py`, our case set): what the model
does with them is its own; nothing here writes its output for it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from cli.eval import register
from config.settings import Settings
from testing.llama_server import LlamaProcess
from tests.conftest import new_token
from tests.live.test_streams import STREAM, parse
from tests.llama_support import LlamaServer, log_size

pytestmark = [pytest.mark.slow, pytest.mark.llm]

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "examples" / "eval" / "cases.jsonl"
BFCL = ROOT / "tests" / "fixtures" / "bfcl"
# Plain questions of our case set whose greedy first line is a command on this model (measured)
PLAIN_BUT_GREEDY_COMMAND = "Hi! How are you today?"  # greedy: /remember…; by mass: prose (2026-12-02)
CACHE_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
SAMPLING = {"llm_temperature": 0.0, "llm_seed": 1234, "llm_timeout_s": 300}


def product(make_app: Any, server: LlamaServer, **settings: Any) -> Any:
    return make_app(llm_base_url=server.base_url, llm_model=server.model, judge_enabled=False, **SAMPLING, **settings)


def turn(app: Any, token: str, message: str, session_id: str | None = None) -> list[dict[str, Any]]:
    body = {"message": message, **({"session_id": session_id} if session_id else {})}
    answer = app.test_client().post("/chat", json=body, headers={"Authorization": f"Bearer {token}", **STREAM})
    assert answer.status_code == 200
    return parse(answer.get_data(as_text=True))


def names(frames: list[dict[str, Any]]) -> list[str]:
    return [frame["event"] for frame in frames]


def test_by_mass_a_plain_question_gets_prose_where_greedy_writes_a_command(
    make_app: Any, llama_server: LlamaServer
) -> None:
    greedy = product(make_app, llama_server, llm_decide="greedy")
    frames = turn(greedy, new_token(greedy), PLAIN_BUT_GREEDY_COMMAND)
    assert "command.detected" in names(frames), frames[-1]  # the control: greedy over-fires here
    by_mass = product(make_app, llama_server)  # the default: auto, and this server gives log-probabilities
    frames = turn(by_mass, new_token(by_mass), PLAIN_BUT_GREEDY_COMMAND)
    [decided] = [frame["data"] for frame in frames if frame["event"] == "pass.decided"]
    assert decided["decision"] == "prose" and decided["reads"] == 1
    assert "command.detected" not in names(frames)
    assert [m["role"] for m in frames[-1]["data"]["messages"]] == ["user", "assistant"]


def test_the_reads_and_the_pass_keep_the_servers_prefix_cache(make_app: Any, llama_server: LlamaServer) -> None:
    """The server's own count of the prompt tokens it evaluated: on a second turn each read and
    the pass find the system prompt, the demonstrations and the history in its cache."""
    app = product(make_app, llama_server)
    token = new_token(app)
    first = turn(app, token, PLAIN_BUT_GREEDY_COMMAND)  # one pass: the cache holds a first pass's context
    session_id = first[-1]["data"]["session_id"]
    offset = log_size(llama_server)
    second = turn(app, token, "What is the weather like in Oslo?", session_id)
    [decided] = [frame["data"] for frame in second if frame["event"] == "pass.decided"]
    with llama_server.log_path.open("rb") as log:
        log.seek(offset)
        counts = [(int(hit), int(left)) for hit, left in CACHE_HIT.findall(log.read().decode(errors="replace"))]
    first_pass = counts[: decided["reads"] + 1]  # the reads, then the pass they decided (a second pass may follow)
    assert len(first_pass) == decided["reads"] + 1, counts
    for hit, left in first_pass:
        assert left < 0.25 * (hit + left), counts  # far less than the whole prompt evaluated again


def run_eval(server: LlamaServer, *args: str) -> dict[str, Any]:
    settings = Settings(llm_provider="openai", llm_base_url=server.base_url, llm_model=server.model, llm_timeout_s=300)
    group = click.Group()
    register(group, lambda: settings)
    result = CliRunner().invoke(group, ["eval", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output + server.log_tail()
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_the_eval_is_repeatable_at_temperature_zero(llama_server: LlamaServer) -> None:
    report = run_eval(llama_server, str(CASES), "--limit", "3", "--repeat", "2")
    for card in report["cards"]:
        assert card["right_each"][0] == card["right_each"][1] and card["false_each"][0] == card["false_each"][1]
    replies: dict[tuple[str, str], set[str | None]] = {}
    for case in report["cases"]:
        replies.setdefault((case["id"], case["option"]), set()).add(case["reply"])
    assert all(len(seen) == 1 for seen in replies.values()), replies


@pytest.fixture(scope="module")
def native_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaProcess]:
    """The same model with the chat format that reads `tools` (llama-cpp-python's)."""
    running = LlamaProcess.start(
        tmp_path_factory.mktemp("llama-native") / "server.log", chat_format="chatml-function-calling"
    )
    try:
        yield running
    finally:
        running.stop()


def test_native_reports_next_to_the_text_protocol(llama_server: LlamaServer, native_server: LlamaProcess) -> None:
    files = [str(BFCL / "BFCL_v4_simple_python.json"), str(BFCL / "BFCL_v4_irrelevance.json")]
    report = run_eval(llama_server, *files, "--native", "--native-base-url", native_server.base_url)
    labels = [card["option"]["label"] for card in report["cards"]]
    assert labels[-1] == "native function calling (tools field)" and labels[0].startswith("text:")
    native = report["cards"][-1]
    assert native["failures"] == 0 and native["right_tool"]["total"] == 3 and native["false_commands"]["total"] == 2
    for case in report["cases"]:
        if case["option"].startswith("native"):
            assert case["reply"] is not None  # a tool call or a plain answer, read from the server
