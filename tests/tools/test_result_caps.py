"""The caps of one tool result (`tools/result_caps.py`, SPEC 12): measuring without
serialising a huge value, cutting it down to the budget, keeping its shape."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tools.base import ToolResult
from tools.result_caps import CUT_MARK, MAX_OUTPUT_BYTES, bounded, clip_json, clip_text, json_size

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=6), children, max_size=5),
    max_leaves=50,
)


@given(JSON_VALUES)
def test_json_size_is_the_stored_size(value: object) -> None:
    assert json_size(value, 10**9) == len(json.dumps(value))


@given(JSON_VALUES, st.integers(min_value=2, max_value=400))
def test_json_size_says_over_exactly_when_it_is(value: object, budget: int) -> None:
    size = json_size(value, budget)
    assert size == (len(json.dumps(value)) if len(json.dumps(value)) <= budget else None)


@given(JSON_VALUES, st.integers(min_value=64, max_value=2_000))
def test_clipped_values_fit_and_small_ones_are_untouched(value: object, budget: int) -> None:
    clipped = clip_json(value, budget)
    assert len(json.dumps(clipped.value)) <= budget
    assert clipped.truncated == (len(json.dumps(value)) > budget)
    if not clipped.truncated:
        assert clipped.value is value


def test_the_shape_survives_the_cut() -> None:
    rows = [[i, "w" * 5_000, {"k": "v" * 5_000}] for i in range(2_000)]
    output = {"columns": ["id", "wide", "obj"], "rows": rows, "count": 2_000}
    clipped = clip_json(output)
    assert clipped.truncated and len(json.dumps(clipped.value)) <= MAX_OUTPUT_BYTES
    kept = clipped.value
    assert kept["columns"] == ["id", "wide", "obj"] and kept["count"] == 2_000
    first = kept["rows"][0]
    assert first[0] == 0 and first[1].endswith(CUT_MARK) and first[2]["k"].endswith(CUT_MARK)
    assert kept["rows"][-1] == f"[{2_000 - (len(kept['rows']) - 1)} more items truncated]"


def test_many_keys_are_cut_with_a_note() -> None:
    clipped = clip_json({f"key{i}": i for i in range(100_000)}, 4_096)
    assert clipped.value["…"].endswith("more entries truncated]") and len(json.dumps(clipped.value)) <= 4_096


@pytest.mark.parametrize(
    "value",
    [
        {"s": "x" * 100_000_000},
        {"rows": [["y" * 100] * 100 for _ in range(20_000)]},
        {"deep": json.loads("[" * 500 + "1" + "]" * 500)},
    ],
)
def test_a_huge_value_is_cut_in_bounded_time(value: object) -> None:
    started = time.process_time()
    clipped = clip_json(value)
    assert time.process_time() - started < 2.0
    assert clipped.truncated and len(json.dumps(clipped.value)) <= MAX_OUTPUT_BYTES


def test_clip_text_marks_the_cut() -> None:
    assert clip_text("abc", 3) == "abc"
    assert clip_text("abcd", 3) == f"abc\n{CUT_MARK}"


def test_bounded_repairs_surrogates_and_keeps_small_results_as_they_are() -> None:
    small = ToolResult(tool="t", ok=True, output={"a": 1}, text="fine")
    assert bounded(small) is small
    broken = bounded(ToolResult(tool="t", ok=False, error_code="X", message="bad \ud800"))
    assert broken.message == "bad \ufffd"
