"""The bounded JSON body decoder (`api/bounded_json.py`): depth, values and Unicode are
checked before the parser can recurse or allocate, and every outcome is a value."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.bounded_json import MALFORMED, NOT_UNICODE, TOO_DEEP, TOO_MANY_ITEMS, Decoded, Limits, Rejected, decode


def nest(depth: int, kind: str = "[]") -> str:
    opener, closer = ('{"k":', "}") if kind == "{}" else ("[", "]")
    inner = "1" if kind == "{}" else ""
    return opener * depth + inner + closer * depth


def alternating(depth: int) -> str:
    """Arrays and objects in turn, with siblings: no long run of `[` to spot (`depth` + 1 levels)."""
    text = "1"
    for level in range(depth):
        text = f'{{"k": {text}, "j": [1, 2]}}' if level % 2 else f"[0, {text}, {{}}]"
    return text


@pytest.mark.parametrize(
    "body",
    [
        '{"a": [1, 2, {"b": "x"}]}',
        "[[[]], [[]], [[]]]",
        nest(64),
        nest(64, "{}"),
        alternating(63),
        '"\\ud83d\\ude00"',
        '"\\\\ud800"',
        '{"text": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}',
        '{"x": "a\\"[[[{{{"}',
        "[" + ",".join(["1"] * 10_000) + "]",
        '"ünï cödé"',
        "null",
        "1.5e3",
    ],
)
def test_valid_bodies_decode_as_json_does(body: str) -> None:
    assert decode(body) == Decoded(json.loads(body))
    assert decode(body.encode()) == Decoded(json.loads(body))


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (nest(65), TOO_DEEP),
        (nest(65, "{}"), TOO_DEEP),
        (alternating(64), TOO_DEEP),
        (nest(100_000), TOO_DEEP),
        ("[" * 100_000, MALFORMED),
        ("]" * 100_000, MALFORMED),
        ("[}", MALFORMED),
        ("[1, 2", MALFORMED),
        ('"unterminated', MALFORMED),
        ("", MALFORMED),
        ("   ", MALFORMED),
        ("\ufeff{}", MALFORMED),
        ("{'a': 1}", MALFORMED),
        ("[" + ",".join(["1"] * 20_001) + "]", TOO_MANY_ITEMS),
        ("[" + "[]," * 20_000 + "1]", TOO_MANY_ITEMS),
        ('"\\ud800"', NOT_UNICODE),
        ('{"\\udc00": 1}', NOT_UNICODE),
        ('[["x", {"k": "a\\udfffb"}]]', NOT_UNICODE),
        ('"\\ude00\\ud83d"', NOT_UNICODE),
        ("1" * 5000, MALFORMED),
    ],
)
def test_refused_bodies_say_why(body: str, code: str) -> None:
    outcome = decode(body)
    assert isinstance(outcome, Rejected) and outcome.code == code, outcome
    assert outcome.message


def test_a_body_that_is_not_utf8_is_malformed() -> None:
    outcome = decode(b'{"a": "\xff"}')
    assert isinstance(outcome, Rejected) and outcome.code == MALFORMED and "UTF-8" in outcome.message


def test_limits_are_parameters() -> None:
    assert isinstance(decode(nest(5), Limits(max_depth=4)), Rejected)
    assert isinstance(decode("[1, 2, 3]", Limits(max_items=2)), Rejected)
    assert decode(nest(5), Limits(max_depth=5)) == Decoded(json.loads(nest(5)))


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 20_000_000,
        b"]" * 20_000_000,
        b"[" * 10_000_000 + b"]" * 10_000_000,
        b'"' + b'\\"' * 10_000_000,
        b"[" + b"1," * 10_000_000 + b"1]",
        b'"' + b"\\u0041" * 3_000_000 + b'"',
        b"[" + b'"a",' * 5_000_000 + b"1]",
    ],
)
def test_hostile_bodies_are_judged_in_linear_time(body: bytes) -> None:
    """20 MB of the worst shapes for a regex or a recursive parser: each well under a second."""
    started = time.process_time()
    decode(body)
    assert time.process_time() - started < 2.0


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=40,
)


@given(VALUES)
def test_any_valid_value_round_trips(value: object) -> None:
    assert decode(json.dumps(value)) == Decoded(value)
    assert decode(json.dumps(value, ensure_ascii=False).encode()) == Decoded(value)


@given(VALUES, st.sampled_from(["\\ud800", "\\udbff", "\\udc00", "\\udfff", "\\ude00\\ud83d"]), st.data())
def test_a_lone_surrogate_anywhere_is_refused(value: object, escape: str, data: st.DataObject) -> None:
    body = json.dumps([value, "x"])
    at = data.draw(st.sampled_from([i + 1 for i, char in enumerate(body) if char == '"' and body[i - 1] != "\\"]))
    bad = body[:at] + escape + body[at:]
    outcome = decode(bad)
    if isinstance(outcome, Rejected) and outcome.code == MALFORMED:
        return  # the quote picked closed a string: the escape landed outside any string
    assert isinstance(outcome, Rejected) and outcome.code == NOT_UNICODE
