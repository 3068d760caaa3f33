"""Score one run: did the model call the right command, well formed, with the right arguments,
and did its answer use the result?

Arguments are compared as the Berkeley Function Calling Leaderboard's AST checker compares
them (our own implementation of its rules):

- strings after normalisation: lower case, spaces and the punctuation `,./-_*^` removed,
  `'` read as `"`;
- an int is accepted where a float is expected (not the reverse), a bool only for a bool;
- lists element by element, in order; dicts key by key, each value against its own list of
  acceptable values (a key missing from the call is right when "" is acceptable);
- strict (BFCL's cases): every required parameter given, no parameter the answer does not
  know, and a parameter left out is right only when "" is among its acceptable values.

Our own cases are not strict: they name the fields that matter (`args`, `args_contain`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evaluation.cases import Expectation
from evaluation.run import CaseRun

_IGNORED = re.compile(r"[ ,./\-_*^]")
OPTIONAL = ""  # BFCL: among the acceptable values, "the parameter may be left out"


def normalise(text: str) -> str:
    return _IGNORED.sub("", text).lower().replace("'", '"')


def same_value(actual: Any, expected: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and actual == expected
    if isinstance(expected, float):
        return isinstance(actual, int | float) and float(actual) == expected
    if isinstance(expected, int):
        return isinstance(actual, int) and actual == expected
    if isinstance(expected, str):
        return isinstance(actual, str) and normalise(actual) == normalise(expected)
    if isinstance(expected, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(expected)
            and all(same_value(a, e) for a, e in zip(actual, expected, strict=True))
        )
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and not dict_problem(actual, expected)
    return bool(actual == expected)


def acceptable(values: Any) -> tuple[Any, ...]:
    """A nested BFCL dict gives each key a list of acceptable values; a plain value is one."""
    return tuple(values) if isinstance(values, list | tuple) else (values,)


def value_matches(actual: Any, values: Sequence[Any]) -> bool:
    return any(same_value(actual, expected) for expected in values)


def dict_problem(actual: Mapping[str, Any], expected: Mapping[str, Any]) -> str | None:
    for key, value in actual.items():
        if key not in expected:
            return f"unexpected key {key!r}"
        if not value_matches(value, acceptable(expected[key])):
            return f"{key}={json.dumps(value)}"
    for key, values in expected.items():
        if key not in actual and OPTIONAL not in acceptable(values):
            return f"missing key {key!r}"
    return None


def args_problem(expect: Expectation, args: Mapping[str, Any]) -> str | None:
    """Why the call's arguments are not the expected ones, or None when they are."""
    if expect.strict:
        for name in expect.required:
            if name not in args:
                return f"missing required parameter {name!r}"
        for name in args:
            if name not in expect.args:
                return f"unexpected parameter {name!r}"
    for name, values in expect.args.items():
        if name not in args:
            if OPTIONAL in values:
                continue
            return f"missing {name!r}"
        if not value_matches(args[name], values):
            shown = ", ".join(json.dumps(v, ensure_ascii=False) for v in values if v != OPTIONAL)
            return f"{name}={json.dumps(args[name], ensure_ascii=False)}, expected {shown}"
    for name, words in expect.args_contain.items():
        text = normalise(str(args.get(name, "")))
        missing = [word for word in words if normalise(word) not in text]
        if missing:
            return f"{name} does not mention {', '.join(missing)}"
    return None


@dataclass(frozen=True)
class Verdict:
    """One run, scored. None: the question does not apply to this case."""

    right_tool: bool | None  # a tool was expected: did the model call it?
    well_formed: bool | None  # a command was written: offered, and its arguments accepted?
    args_match: bool | None  # a tool was expected: the right one, well formed, right arguments?
    false_command: bool | None  # no tool was expected: did the model write a command?
    answer_uses: bool | None  # the answer contains what it should (after the result, or plainly)
    problem: str = ""  # what went wrong, for a person


def score(run: CaseRun) -> Verdict:
    case, call = run.case, run.call
    if run.failure is not None and run.reply is None:
        return Verdict(None, None, None, None, None, run.failure)
    well_formed = None if call is None else call.well_formed
    uses = answer_uses(run)
    if case.expect is None:
        problem = "" if call is None else f"false command: {call.line}"
        return Verdict(None, well_formed, None, call is not None, uses, problem or uses_problem(uses))
    expect = case.expect
    if call is None:
        return Verdict(False, None, False, None, uses, "no command")
    right = expect.command is None or call.name == expect.command
    if not call.well_formed or call.args is None:
        reason = "not a command of the list" if not call.offered else call.problem
        return Verdict(right, False, False, None, uses, f"{call.line}: {reason}")
    if not right:
        return Verdict(False, True, False, None, uses, f"/{call.name} instead of /{expect.command}")
    mismatch = None if expect.command is None else args_problem(expect, call.args)
    return Verdict(True, True, mismatch is None, None, uses, mismatch or uses_problem(uses))


def answer_uses(run: CaseRun) -> bool | None:
    """Scored where there is an answer to read: after the result for a tool case (the call
    was run), the plain answer for a case that needs none."""
    case = run.case
    if not case.answer_uses or run.answer is None:
        return None
    if case.needs_tool and (run.call is None or not run.call.well_formed):
        return None
    text = normalise(run.answer)
    return all(normalise(needle) in text for needle in case.answer_uses)


def uses_problem(uses: bool | None) -> str:
    return "the answer does not use the result" if uses is False else ""
