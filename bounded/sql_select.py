"""A task's `sql_result` check inside the worker: setup script, then one read-only SELECT.

The instructor's `setup_sql` (validated at import) builds a fresh in-memory database; the
learner's statement then runs under an authorizer that allows reads only (no writes, no
PRAGMA, no ATTACH), SQLite's limits (`sql_limits.py`), a progress-handler deadline, and an exact
fetch within a row cap and a byte budget. Messages say what went wrong, never the expected
rows.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from bounded.sql_fetch import OverBudget, fetch_exact
from bounded.sql_limits import MB, EngineLimits, apply_heap_limit, apply_statement_limits
from bounded.sql_values import SelectAnswer, SelectJob, SqlError, timeout_error

LIMITS = EngineLimits(value_bytes=1 * MB)
ANSWER_BUDGET_BYTES = 1 * MB  # expected results are small tables; a larger one cannot be right
PROGRESS_EVERY_OPS = 1000
_READ_ONLY_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)


class Refused(Exception):
    """The answer cannot be graded as it is; `error.message` is shown to the learner."""

    def __init__(self, error: SqlError) -> None:
        super().__init__(error.message)
        self.error = error


def _read_only(action: int, *_: object) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ONLY_ACTIONS else sqlite3.SQLITE_DENY


def run_select_job(job: SelectJob, started: Callable[[], None]) -> SelectAnswer:
    db = sqlite3.connect(":memory:", isolation_level=None)
    try:
        apply_heap_limit(db, LIMITS)
        db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMITS.value_bytes)
        db.executescript(job.setup_sql)  # the instructor's script, validated at import
        apply_statement_limits(db, LIMITS)
        db.set_authorizer(_read_only)
        started()
        deadline = time.monotonic() + job.deadline_s
        db.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_EVERY_OPS)
        try:
            cursor = db.execute(job.sql)
            if cursor.description is None:
                raise Refused(SqlError("VALIDATION_FAILED", "the statement returned no result set; submit a SELECT"))
            columns = [column[0] for column in cursor.description]
            rows = fetch_exact(cursor, job.max_rows, ANSWER_BUDGET_BYTES)
        except sqlite3.ProgrammingError:
            raise Refused(SqlError("VALIDATION_FAILED", "submit exactly one SELECT statement")) from None
        except OverBudget as over:
            if over.reason == "rows":
                raise Refused(SqlError("TOO_LARGE", f"more than {job.max_rows} rows returned")) from None
            raise Refused(SqlError("TOO_LARGE", f"the result is larger than {ANSWER_BUDGET_BYTES // MB} MB")) from None
        except (sqlite3.Error, UnicodeError, OverflowError) as error:
            raise Refused(_explain(error, deadline, job.deadline_s)) from None
        return SelectAnswer(columns=columns, rows=rows)
    finally:
        db.close()


def _explain(error: BaseException, deadline: float, deadline_s: float) -> SqlError:
    text = str(error)
    if text == "interrupted" or time.monotonic() > deadline:
        return timeout_error(deadline_s)
    if "not authorized" in text:
        return SqlError("PERMISSION_DENIED", "only a read-only SELECT is allowed (no writes, PRAGMA or ATTACH)")
    if "too big" in text or "too many columns" in text:
        return SqlError(
            "TOO_LARGE",
            f"{text}: values are at most {LIMITS.value_bytes // MB} MB and rows at most {LIMITS.columns} columns",
        )
    return SqlError("VALIDATION_FAILED", text)
