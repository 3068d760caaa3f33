"""Test outcomes come from stdout and the SQL runner's JSON, never from console scraping."""

from __future__ import annotations

import json

import pytest

from judge.compare import compare_sql, compare_stdout
from judge.models import SqlCase, TestCase


@pytest.mark.parametrize(
    ("mode", "expected", "got", "passed"),
    [
        ("exact", "1 2\n", "1 2\n", True),
        ("exact", "1 2\n", "1 2", False),
        ("trimmed", "1 2\n3", "1 2  \r\n3\n\n", True),
        ("trimmed", "1 2\n3", "1  2\n3", False),
        ("tokens", "1 2\n3", " 1\t2 3 ", True),
        ("tokens", "1 2 3", "1 2 4", False),
        ("tokens", "1 2 3", "1 2", False),
    ],
)
def test_stdout_comparison_modes(mode: str, expected: str, got: str, passed: bool) -> None:
    case = TestCase(name="t", expected_stdout=expected, compare=mode)  # type: ignore[arg-type]
    assert compare_stdout(case, got)[0] is passed


def test_messages_never_reveal_the_expected_output() -> None:
    case = TestCase(name="t", expected_stdout="secret-answer")
    passed, message = compare_stdout(case, "guess")
    assert not passed and "secret-answer" not in message


def _doc(columns: list[str], rows: list[list[object]]) -> str:
    return json.dumps({"columns": columns, "rows": rows})


def test_sql_unordered_ignores_row_order_but_ordered_does_not() -> None:
    unordered = SqlCase(name="u", expected_columns=["a"], expected_rows=[[1], [2]])
    ordered = unordered.model_copy(update={"ordered": True})
    assert compare_sql(unordered, _doc(["a"], [[2], [1]]))[0]
    assert not compare_sql(ordered, _doc(["a"], [[2], [1]]))[0]
    assert compare_sql(ordered, _doc(["a"], [[1], [2]]))[0]


def test_sql_compares_columns_counts_and_values() -> None:
    case = SqlCase(name="s", expected_columns=["n", "avg"], expected_rows=[[1, 2.5], [2, 3]])
    assert compare_sql(case, _doc(["N", "AVG"], [[2, 3.0], [1, 2.5000000001]]))[0]
    assert not compare_sql(case, _doc(["n", "total"], [[1, 2.5], [2, 3]]))[0]
    assert not compare_sql(case, _doc(["n", "avg"], [[1, 2.5]]))[0]
    assert not compare_sql(case, _doc(["n", "avg"], [[1, 2.5], [2, 4]]))[0]
    assert compare_sql(case, json.dumps({"error": "OperationalError: no such table"}))[1].startswith("SQL error")
    assert not compare_sql(case, "not json")[0]
