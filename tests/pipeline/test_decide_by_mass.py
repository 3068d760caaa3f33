"""The decision by probability mass (SPEC 6.11, `LLM_DECIDE`), against the fake model server
speaking OpenAI's `logprobs`: when the reads happen, what they decide, what holds the pass to it,
and that a server without log-probabilities, an open circuit or `greedy` keep today's path.
(Against the real SmolLM2: tests/llm/test_decide_real.py.)"""

from __future__ import annotations

import math
from typing import Any

import pytest

from commands.grammar import exact_grammar, first_line_grammar, prose_grammar
from pipeline.decide import command_mass
from pipeline.shortlist import Shortlister
from providers import Odds, TokenOdds
from testing.fake_llm import FakeLLMServer
from tests.conftest import new_token
from tests.live.test_streams import STREAM, parse
from tools.catalog import build_registry

ln = math.log


def first_token(slash: float) -> list[tuple[str, float, list[tuple[str, float]]]]:
    """A first token whose alternatives put `slash` of the probability on tokens starting a command."""
    top = [
        ("/", ln(slash * 0.8)),
        (" /", ln(slash * 0.2)),
        ("The", ln((1 - slash) * 0.6)),
        ("Paris", ln((1 - slash) * 0.3)),
    ]
    best = max(top, key=lambda item: item[1])
    return [(best[0], best[1], top)]


def model(slash: float, liked: str = "weather") -> Any:
    """The fake's odds: `slash` on the first read; on a scoring read (`/name ` held by a grammar)
    a mean of -0.5 per token for `liked`, -3 for any other name."""

    def odds(body: dict[str, Any]) -> list[tuple[str, float, list[tuple[str, float]]]]:
        if body["max_tokens"] == 1:
            return first_token(slash)
        text = body["grammar"].split('"')[1]
        score = -0.5 if text == f"/{liked} " else -3.0
        return [(piece, score, [(piece, score)]) for piece in ("/", text[1:-1], " ")]

    return odds


def chat(app: Any, message: str) -> list[dict[str, Any]]:
    client = app.test_client()
    if not hasattr(app, "test_token"):
        app.test_token = new_token(app)
    headers = {"Authorization": f"Bearer {app.test_token}", **STREAM}
    answer = client.post("/chat", json={"message": message}, headers=headers)
    assert answer.status_code == 200
    return parse(answer.get_data(as_text=True))


def decided(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [frame["data"] for frame in frames if frame["event"] == "pass.decided"]


@pytest.fixture
def app(make_app: Any, fake_llm: FakeLLMServer) -> Any:
    return make_app(llm_base_url=fake_llm.openai_base_url, command_shortlist=3)


def test_little_mass_on_a_command_holds_the_pass_to_prose(app: Any, fake_llm: FakeLLMServer) -> None:
    fake_llm.odds = model(slash=0.3)  # `/` is the likeliest single token, prose far likelier together
    fake_llm.queue("Paris is the capital of France.")
    frames = chat(app, "What is the capital of France?")
    [read] = fake_llm.odds_requests
    assert read["max_tokens"] == 1 and read["top_logprobs"] == 20 and read["stream"] is False
    [chat_call] = fake_llm.requests  # the reads are apart from the pass's calls (SPEC 6.6)
    assert chat_call["grammar"] == prose_grammar()
    assert read["messages"] == chat_call["messages"]  # the same context: a prefix cache answers it once
    assert decided(frames) == [
        {
            "turn_id": frames[0]["data"]["turn_id"],
            "pass": 0,
            "decision": "prose",
            "reads": 1,
            "elapsed_ms": decided(frames)[0]["elapsed_ms"],
        }
    ]
    assert frames[-1]["data"]["reply"] == "Paris is the capital of France."


def test_more_mass_on_a_command_scores_the_short_list_and_holds_the_pass_to_the_best(
    app: Any, fake_llm: FakeLLMServer
) -> None:
    fake_llm.odds = model(slash=0.7, liked="weather")
    fake_llm.queue("/weather Oslo", "It is cold in Oslo.")
    frames = chat(app, "What is the weather like in Oslo tomorrow?")
    scoring = [body["grammar"] for body in fake_llm.odds_requests[1:]]
    assert len(scoring) == 3 == len(set(scoring))  # COMMAND_SHORTLIST=3: one read per candidate, no more
    assert exact_grammar("/weather ") in scoring
    assert all(read["messages"] == fake_llm.requests[0]["messages"] for read in fake_llm.odds_requests)
    first_pass = fake_llm.requests[0]
    assert first_pass["grammar"].startswith("root ::= command\n") and '"weather"' in first_pass["grammar"]
    assert "prose ::=" not in first_pass["grammar"].split("\n")[0]
    assert decided(frames)[0]["decision"] == "command" and decided(frames)[0]["reads"] == 4
    assert [m["role"] for m in frames[-1]["data"]["messages"]] == ["user", "weather_tools", "assistant"]


def test_the_score_is_the_mean_per_token_log_probability(app: Any, fake_llm: FakeLLMServer) -> None:
    fake_llm.odds = model(slash=0.9, liked="remember")
    fake_llm.queue("/remember I like tea", "Noted.")
    chat(app, "remember that I like tea, and what is the weather")
    assert '"remember"' in fake_llm.requests[0]["grammar"] and '"weather"' not in fake_llm.requests[0]["grammar"]


def test_a_server_without_log_probabilities_keeps_the_greedy_path_and_is_not_asked_again(
    app: Any, fake_llm: FakeLLMServer
) -> None:
    fake_llm.queue("/remember tea", "Noted.", "Hello!")
    chat(app, "remember tea")
    # asked once with the grammar, once without (a refused grammar is told apart), then never again
    assert len(fake_llm.odds_requests) == 2 and "grammar" not in fake_llm.odds_requests[1]
    assert "grammar" not in fake_llm.requests[0]  # LLM_GRAMMAR=off: as sampled, as before
    frames = chat(app, "hello")
    assert len(fake_llm.odds_requests) == 2 and decided(frames) == []


def test_greedy_never_reads(make_app: Any, fake_llm: FakeLLMServer) -> None:
    app = make_app(llm_base_url=fake_llm.openai_base_url, llm_decide="greedy")
    fake_llm.odds = model(slash=0.3)
    fake_llm.queue("Hi.")
    assert decided(chat(app, "hello")) == [] and fake_llm.odds_requests == []


def test_a_threshold_moves_the_decision(make_app: Any, fake_llm: FakeLLMServer) -> None:
    app = make_app(llm_base_url=fake_llm.openai_base_url, llm_decide_threshold=0.2)
    fake_llm.odds = model(slash=0.3, liked="weather")
    fake_llm.queue("/weather Oslo", "Cold.")
    assert decided(chat(app, "weather in Oslo"))[0]["decision"] == "command"


def test_an_open_circuit_is_not_read(make_app: Any, fake_llm: FakeLLMServer) -> None:
    app = make_app(llm_base_url=fake_llm.openai_base_url, provider_breaker_failures=1, provider_breaker_cooldown_s=600)
    fake_llm.odds = model(slash=0.3)
    fake_llm.queue(500, 500)
    client = app.test_client()
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    assert client.post("/chat", json={"message": "hi"}, headers=auth).status_code == 502
    reads = len(fake_llm.odds_requests)
    assert client.post("/chat", json={"message": "hi again"}, headers=auth).status_code == 502
    assert len(fake_llm.odds_requests) == reads  # the circuit is open: no read either


def test_the_mass_counts_every_token_that_starts_a_command() -> None:
    odds = Odds(
        tokens=(TokenOdds("/", ln(0.3), (("/", ln(0.3)), (" /", ln(0.25)), ("\t/x", ln(0.05)), ("Hi", ln(0.4)))),)
    )
    assert command_mass(odds) == pytest.approx(0.6)


def test_command_only_and_prose_only_grammars() -> None:
    catalog = [tool for tool in build_registry().commands() if tool.command and tool.command.name == "weather"]
    assert first_line_grammar(catalog, prose=False).startswith("root ::= command\n")
    assert prose_grammar().startswith("root ::= prose\n")
    assert exact_grammar("/weather ") == 'root ::= "/weather "\n'


def test_the_short_list_finds_the_command_a_request_names() -> None:
    shortlist = Shortlister(list(build_registry().commands()))
    assert shortlist.best("what's the weather in Paris", 3)[0] == "weather"
    assert "remember" in shortlist.best("please remember that my cat is called Tom", 3)
    assert len(shortlist.best("anything", 0)) == len(shortlist.names)
