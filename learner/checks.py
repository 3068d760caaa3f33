"""Grade one answer against a task's acceptance criteria, by criterion type.

- `code_test`: the answer is the program's entry file; the judge runs every case (Docker).
- `sql_result`: the answer is one SELECT, run in a SQL worker of the app's worker pool
  (`bounded/sql.py`, never in the server process) on a fresh in-memory SQLite database
  that the criterion's `setup_sql` builds. SQLite's authorizer allows reads only (no ATTACH, no PRAGMA, no
  writes), SQLite's size and heap limits bound what one call can build, the worker is
  killed at `SQL_TIMEOUT_S`, and the result is fetched within a row cap and a byte budget;
  it is compared with `judge.compare.compare_sql`.
- `text_match`: a regex search (or full match) with the `regex` module's timeout.
- `manual`: no verdict; the attempt waits for an instructor.
Messages say what failed, never the expected output. `JudgeUnavailable` means the answer
could not be graded at all (no attempt should be counted).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

import regex
from pydantic import BaseModel, TypeAdapter

from bounded.pool import WorkerPool, pool_or_own
from bounded.sql import run_select as run_select_job
from bounded.sql_values import SelectJob, SqlError
from foundation.fair_share import Busy
from judge.compare import compare_sql
from judge.files import SubmissionError
from judge.languages import LANGUAGES
from judge.models import SqlCase
from learner.spec import CodeTestCriterion, Criterion, ManualCriterion, SqlResultCriterion, TextMatchCriterion

SQL_TIMEOUT_S = 1.0
SQL_MAX_ROWS = 1000
REGEX_TIMEOUT_S = 1.0
STDERR_SHOWN = 600
_CRITERIA = TypeAdapter(list[Criterion])

Outcome = Literal["passed", "failed", "pending_review"]


class JudgeUnavailable(Exception):
    """A `code_test` criterion cannot run here now (no judge, Docker down, judge failure)."""


class AnswerRejected(Exception):
    """The answer cannot be submitted as it is (e.g. too large for the judge)."""


class CheckResult(BaseModel):
    criterion_id: str
    type: str
    passed: bool | None  # None: waiting for an instructor's review
    message: str


def parse_criteria(stored: list[dict[str, Any]]) -> list[Criterion]:
    return _CRITERIA.validate_python(stored)


def outcome(results: list[CheckResult]) -> Outcome:
    if any(result.passed is False for result in results):
        return "failed"
    if any(result.passed is None for result in results):
        return "pending_review"
    return "passed"


def run_checks(
    criteria: list[Criterion],
    answer: str,
    judge: Any,
    remaining: Callable[[float], float],
    pool: WorkerPool | None = None,
    user: int | None = None,
) -> list[CheckResult]:
    """One result per criterion, in order; `remaining(cap)` bounds each step by the call's deadline.

    `pool` runs the `sql_result` checks (the app's warm workers); without one, a one-off
    worker runs each. `user`'s fair share of the pool and of the judge is used."""
    results = []
    for criterion in criteria:
        if isinstance(criterion, CodeTestCriterion):
            passed, message = check_code(criterion, answer, judge, user)
        elif isinstance(criterion, SqlResultCriterion):
            passed, message = check_sql(criterion, answer, remaining(SQL_TIMEOUT_S), pool, user)
        elif isinstance(criterion, TextMatchCriterion):
            passed, message = check_text(criterion, answer, remaining(REGEX_TIMEOUT_S))
        else:
            assert isinstance(criterion, ManualCriterion)
            passed, message = None, "waiting for an instructor's review"
        results.append(CheckResult(criterion_id=criterion.id, type=criterion.type, passed=passed, message=message))
    return results


def check_code(criterion: CodeTestCriterion, answer: str, judge: Any, user: int | None = None) -> tuple[bool, str]:
    if judge is None:
        raise JudgeUnavailable("code execution is not available on this server")
    available, reason = judge.available()
    if not available:
        raise JudgeUnavailable(f"the code judge is unavailable ({reason})")
    entry = LANGUAGES[criterion.language].entry
    try:
        verdict = judge.run_tests(criterion.language, {entry: answer}, criterion.cases, user=user)
    except SubmissionError as error:
        raise AnswerRejected(str(error)) from error
    if verdict.status == "internal_error":
        raise JudgeUnavailable(f"the code judge failed ({verdict.stderr[:200].strip() or 'no detail'})")
    tests = verdict.tests or []
    passed = sum(1 for test in tests if test.passed)
    if verdict.status == "ok":
        return True, f"all {len(tests)} tests passed"
    failures = "; ".join(f"{test.name}: {test.message}" for test in tests if not test.passed)
    message = f"{passed} of {len(tests)} tests passed ({verdict.status.replace('_', ' ')}): {failures}"
    if verdict.status in ("compile_error", "runtime_error") and verdict.stderr.strip():
        message += f"\nstderr: {verdict.stderr.strip()[-STDERR_SHOWN:]}"
    return False, message


def check_sql(
    criterion: SqlResultCriterion,
    answer: str,
    timeout_s: float,
    pool: WorkerPool | None = None,
    user: int | None = None,
) -> tuple[bool, str]:
    case = SqlCase(
        name=criterion.id,
        setup_sql=criterion.setup_sql,
        expected_columns=criterion.expected_columns,
        expected_rows=criterion.expected_rows,
        ordered=criterion.ordered,
    )
    return compare_sql(case, json.dumps(run_select(criterion.setup_sql, answer, timeout_s, pool, user)))


def run_select(
    setup_sql: str, query: str, timeout_s: float, pool: WorkerPool | None = None, user: int | None = None
) -> dict[str, Any]:
    """`{"columns", "rows"}` of one read-only statement on a fresh database, or `{"error"}`.

    Raises JudgeUnavailable when the statement could not be run at all (the setup script
    failed, no worker could start): that is not the learner's answer failing."""
    job = SelectJob(setup_sql=setup_sql, sql=query, deadline_s=timeout_s, max_rows=SQL_MAX_ROWS)
    with pool_or_own(pool) as used:
        answer = run_select_job(used, job, user=user)
    if isinstance(answer, SqlError):
        if answer.code == "BUSY":
            raise Busy(answer.message)  # not the learner's answer failing: no attempt is counted
        if answer.code == "UNAVAILABLE":
            raise JudgeUnavailable(f"the SQL checker is unavailable ({answer.message})")
        return {"error": answer.message}
    return {"columns": answer.columns, "rows": answer.rows}


def check_text(criterion: TextMatchCriterion, answer: str, timeout_s: float) -> tuple[bool, str]:
    compiled = regex.compile(criterion.pattern, regex.IGNORECASE if criterion.ignore_case else 0)
    matcher = compiled.fullmatch if criterion.mode == "fullmatch" else compiled.search
    try:
        matched = matcher(answer, timeout=timeout_s) is not None
    except TimeoutError:
        return False, "the answer took too long to check; shorten it and submit again"
    if matched:
        return True, "the answer matches"
    return False, f"the answer does not meet this criterion: {criterion.description}"
