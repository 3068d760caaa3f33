"""The report card (evaluation/report.py): what each rate counts, the table, the JSON."""

from __future__ import annotations

import json

from evaluation.cases import Case, Expectation
from evaluation.report import Tally, card, json_report, table, text_report
from evaluation.run import Call, CaseRun, Option, PassStats

ON = Option(demos=True, grammar=True)
OFF = Option(demos=False, grammar=False)
WEATHER = Case("w", "t", (("user", "rain?"),), Expectation("weather", {"place": ("Lyon",)}), result="14°C")
CHAT = Case("c", "t", (("user", "hi"),), None, answer_uses=("hello",))


def runs(option: Option) -> list[CaseRun]:
    good = Call("weather", "/weather Lyon", True, {"place": "Lyon"})
    return [
        CaseRun(
            WEATHER, option, "/weather Lyon", good, "It is 14°C.", (PassStats(100.0, 9, 0.5), PassStats(50.0, 11, 0.5))
        ),
        CaseRun(
            CHAT,
            option,
            "/weather hi",
            Call("weather", "/weather hi", True, {"place": "hi"}),
            None,
            (PassStats(300.0, 4, 0.0),),
        ),
        CaseRun(CHAT, option, None, failure="provider: timeout", passes=(PassStats(None, 0, 0.0, "timeout"),)),
    ]


def test_tally():
    assert str(Tally.of([True, False, None, True])) == "2/3 67%"
    assert str(Tally.of([None])) == "n/a" and Tally(0, 0).rate is None


def test_a_card_counts_each_rate_out_of_the_cases_it_applies_to():
    found = card("openai/m", ON, runs(ON))
    assert (found.cases, found.failures) == (3, 1)
    assert (found.right_tool, found.args_match) == (Tally(1, 1), Tally(1, 1))
    assert found.well_formed == Tally(2, 2) and found.false_commands == Tally(1, 1)
    assert found.answer_uses == Tally(0, 0)  # the chat case ended at its (false) command
    assert found.ttft_ms == 200.0  # the median of the first passes that gave text
    assert found.tokens_per_s == 24.0  # 24 tokens after the first, over 1 s of decoding


def test_table_and_text_report():
    cards = [card("openai/m", ON, runs(ON)), card("openai/m", OFF, runs(OFF))]
    lines = table(cards).splitlines()
    assert lines[0].split()[:3] == ["option", "right", "tool"]
    assert lines[1].startswith("text: demos on, grammar on, greedy ") and "200 ms" in lines[1]
    assert lines[1].split()[-2:] == ["24.0", "n/a"]  # tok/s, and no decision by mass to cost anything
    assert lines[2].startswith("text: demos off, grammar off")
    text = text_report(cards, runs(ON) + runs(OFF), ["a note"])
    assert text.splitlines()[:2] == ["model: openai/m", "cases: 3 (1 need a tool, 2 need none)"]
    failures = "text: demos on, grammar on, greedy: 1; text: demos off, grammar off, greedy: 1"
    assert f"provider failures (no reply twice): {failures}" in text
    assert text.endswith("a note")


def test_json_report():
    report = json.loads(json_report([card("openai/m", ON, runs(ON))], runs(ON), ["n"]))
    (found,) = report["cards"]
    assert found["model"] == "openai/m" and found["option"]["label"] == "text: demos on, grammar on, greedy"
    assert found["well_formed"] == {"hits": 2, "total": 2, "rate": 1.0}
    first = report["cases"][0]
    assert first["call"] == {"line": "/weather Lyon", "offered": True, "well_formed": True, "args": {"place": "Lyon"}}
    assert first["verdict"]["args_match"] is True and first["first_text_ms"] == 100.0
    assert report["cases"][2]["failure"] == "provider: timeout" and report["notes"] == ["n"]
