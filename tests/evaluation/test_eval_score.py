"""Scoring calls as BFCL's AST checker does (evaluation/score.py), and the verdict of a run."""

from __future__ import annotations

from typing import Any

import pytest

from evaluation.cases import Case, Expectation
from evaluation.run import Call, CaseRun, Option
from evaluation.score import args_problem, normalise, same_value, score, value_matches


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [
        ("San Francisco, CA", "san francisco ca", True),  # case, spaces and commas ignored
        ("2024-03-01", "2024/03/01", True),  # - and / ignored
        ("a_b*c^d.e", "ABCDE", True),
        ("it's", 'it"s', True),  # ' read as "
        ("Paris", "Lyon", False),
        ("Paris!", "Paris", False),  # only ,./-_*^ and spaces are ignored
        (5, 5.0, True),  # an int where a float is expected
        (5.0, 5, False),  # not a float where an int is expected
        (True, 1, False),  # a bool is not an int
        (1, True, False),
        (False, False, True),
        ("5", 5, False),  # no string for a number
        (["A b", 2], ["ab", 2], True),  # lists element by element
        (["ab"], ["ab", "c"], False),
        (["c", "ab"], ["ab", "c"], False),  # in order
        ({"k": "V"}, {"k": ["v", "w"]}, True),  # a nested dict's values are lists of acceptable ones
        ({"k": "x"}, {"k": ["v"]}, False),
        ({"k": "v", "z": 1}, {"k": ["v"]}, False),  # an unknown key
        ({}, {"k": ["", "v"]}, True),  # a key that may be left out
        ({}, {"k": ["v"]}, False),
        (None, None, True),
    ],
)
def test_values_compare_as_bfcl_compares_them(actual: Any, expected: Any, same: bool):
    assert same_value(actual, expected) is same


def test_normalise():
    assert normalise(" The-Quick_Brown.Fox,*^/ ") == "thequickbrownfox"


def test_any_acceptable_value_matches():
    assert value_matches("celsius", ("fahrenheit", "Celsius"))
    assert not value_matches("kelvin", ("fahrenheit", "celsius"))


STRICT = Expectation(
    command="convert",
    args={"value": (3.5,), "unit": ("km", "kilometres"), "precision": ("", 2)},
    strict=True,
    required=("value", "unit"),
)


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"value": 3.5, "unit": "KM"}, None),  # the optional one left out: "" is acceptable
        ({"value": 3.5, "unit": "kilometres", "precision": 2}, None),
        ({"value": 3.5}, "missing required parameter 'unit'"),
        ({"value": 3.5, "unit": "km", "colour": "red"}, "unexpected parameter 'colour'"),
        ({"value": 4, "unit": "km"}, "value=4, expected 3.5"),
        ({"value": 3.5, "unit": "km", "precision": 3}, "precision=3, expected 2"),
    ],
)
def test_strict_arguments(args: dict[str, Any], problem: str | None):
    assert args_problem(STRICT, args) == problem


def test_an_omitted_parameter_without_an_empty_alternative_is_missing():
    expect = Expectation(command="f", args={"a": (1,), "b": (2,)}, strict=True, required=("a",))
    assert args_problem(expect, {"a": 1}) == "missing 'b'"


def test_our_cases_check_only_the_fields_they_name():
    expect = Expectation(command="web_search", args={}, args_contain={"query": ("Webb", "tele-scope")})
    assert args_problem(expect, {"query": "James WEBB telescope news", "other": 1}) is None
    assert args_problem(expect, {"query": "Webb"}) == "query does not mention tele-scope"


def case(expect: Expectation | None, *, uses: tuple[str, ...] = (), result: str | None = "r") -> Case:
    return Case(id="c", source="t", messages=(("user", "q"),), expect=expect, result=result, answer_uses=uses)


WEATHER = Expectation(command="weather", args={"place": ("Lyon",)})
OPTION = Option(demos=True, grammar=False)


def run(found: Case, reply: str | None, call: Call | None = None, answer: str | None = None, **kw: Any) -> CaseRun:
    return CaseRun(found, OPTION, reply=reply, call=call, answer=answer, **kw)


def good(name: str = "weather", place: str = "lyon") -> Call:
    return Call(name, f"/{name} {place}", offered=True, args={"place": place})


@pytest.mark.parametrize(
    ("the_run", "verdict"),
    [
        # (right tool, well formed, args match, false command, answer uses)
        (run(case(WEATHER, uses=("14",)), "/weather lyon", good(), "It is 14°C."), (True, True, True, None, True)),
        (run(case(WEATHER, uses=("14",)), "/weather lyon", good(), "It rains."), (True, True, True, None, False)),
        (run(case(WEATHER), "/weather Paris", good(place="Paris"), "x"), (True, True, False, None, None)),
        (run(case(WEATHER), "/web_search lyon", good("web_search"), "x"), (False, True, False, None, None)),
        (
            run(case(WEATHER), "/wether lyon", Call("wether", "/wether lyon", False, None, "unknown")),
            (False, False, False, None, None),
        ),
        (
            run(case(WEATHER), "/weather", Call("weather", "/weather", True, None, "bad")),
            (True, False, False, None, None),
        ),
        (run(case(WEATHER, uses=("14",)), "It is sunny.", None, "It is sunny."), (False, None, False, None, None)),
        (run(case(None, uses=("Rome",)), "Rome.", None, "Rome."), (None, None, None, False, True)),
        (run(case(None), "/weather lyon", good()), (None, True, None, True, None)),
        (
            run(case(Expectation(command=None)), "/anything x", Call("anything", "/anything x", True, {"a": 1})),
            (True, True, True, None, None),
        ),
        (run(case(WEATHER), None, failure="provider: timeout"), (None, None, None, None, None)),
    ],
)
def test_verdicts(the_run: CaseRun, verdict: tuple[bool | None, ...]):
    found = score(the_run)
    assert (found.right_tool, found.well_formed, found.args_match, found.false_command, found.answer_uses) == verdict


def test_a_verdict_says_what_went_wrong():
    assert score(run(case(None), "/weather lyon", good())).problem == "false command: /weather lyon"
    assert score(run(case(WEATHER), "hello", None, "hello")).problem == "no command"
    assert "instead of /weather" in score(run(case(WEATHER), "/web_search lyon", good("web_search"))).problem
