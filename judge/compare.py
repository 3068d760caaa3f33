"""Deciding whether one test passed, from the step's stdout only (never console scraping).

Messages say what differs but never reveal the expected output or the test's input: the
tests of a problem are hidden from the learner.
"""

from __future__ import annotations

import json
import math
from typing import Any

from judge.models import SqlCase, TestCase


def compare_stdout(case: TestCase, stdout: str) -> tuple[bool, str]:
    """(passed, message) for a stdin/stdout test under its comparison mode."""
    if case.compare == "exact":
        got, want = stdout, case.expected_stdout
    elif case.compare == "tokens":
        got_tokens, want_tokens = stdout.split(), case.expected_stdout.split()
        if got_tokens == want_tokens:
            return True, "passed"
        if len(got_tokens) != len(want_tokens):
            return False, f"wrong answer: {len(got_tokens)} tokens printed, {len(want_tokens)} expected"
        index = next(i for i, (a, b) in enumerate(zip(got_tokens, want_tokens, strict=False)) if a != b)
        return False, f"wrong answer: token {index + 1} differs"
    else:
        got, want = _trimmed(stdout), _trimmed(case.expected_stdout)
    if got == want:
        return True, "passed"
    got_lines, want_lines = got.split("\n"), want.split("\n")
    for number, (a, b) in enumerate(zip(got_lines, want_lines, strict=False), start=1):
        if a != b:
            return False, f"wrong answer: line {number} differs"
    return False, f"wrong answer: {len(got_lines)} lines printed, {len(want_lines)} expected"


def _trimmed(text: str) -> str:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def compare_sql(case: SqlCase, stdout: str) -> tuple[bool, str]:
    """(passed, message) from the SQL runner's JSON document."""
    try:
        document = json.loads(stdout)
    except ValueError:
        return False, "the SQL runner printed no result"
    if not isinstance(document, dict):
        return False, "the SQL runner printed no result"
    if "error" in document:
        return False, f"SQL error: {str(document['error'])[:300]}"
    columns, rows = document.get("columns"), document.get("rows")
    if not isinstance(columns, list) or not isinstance(rows, list):
        return False, "the SQL runner printed no result"
    if [str(c).lower() for c in columns] != [c.lower() for c in case.expected_columns]:
        return False, f"wrong columns: got {columns[:20]}, expected {len(case.expected_columns)} named columns"
    if len(rows) != len(case.expected_rows):
        return False, f"wrong answer: {len(rows)} rows returned, {len(case.expected_rows)} expected"
    got = [_row(row) for row in rows]
    want = [_row(row) for row in case.expected_rows]
    if not case.ordered:
        got, want = sorted(got, key=_key), sorted(want, key=_key)
    if got == want:
        return True, "passed"
    if not case.ordered:
        return False, "wrong answer: the rows differ"
    index = next(i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b)
    return False, f"wrong answer: row {index + 1} differs (order matters in this test)"


def _row(row: Any) -> list[Any]:
    return [_cell(value) for value in (row if isinstance(row, list) else [row])]


def _cell(value: Any) -> Any:
    """Numbers compare by value (1 == 1.0), floats to 9 significant digits."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and math.isfinite(value):
        if value == int(value):
            return int(value)
        return float(f"{value:.9g}")
    return value


def _key(row: list[Any]) -> str:
    return json.dumps(row, sort_keys=True, default=str)
