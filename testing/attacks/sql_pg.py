"""The `/memory_sql` attacks of `testing/attacks/sql.py`, in PostgreSQL's dialect, for a server
whose `DATABASE_URL` is PostgreSQL (tests/hostile/test_hostile_sql.py runs both).

Same shapes, same names where the shape is the same: cells too large for a row (refused by the
server's row check before they leave PostgreSQL), a result of many wide columns through chat
(cut to the answer's budget), a statement that runs past the deadline (`statement_timeout` and
the watchdog's cancel), a recursive CTE whose UNION keeps growing (`temp_file_limit`), UPDATEs
whose WHERE runs for ever, and two of them at once. A task's `sql_result` check is not here:
it runs in a SQLite worker whatever the app's database is.
"""

from __future__ import annotations

from testing.attacks import Attack, Outcome, Target
from testing.attacks.sql import ENV, SQL_DEADLINE_S, _two_at_once, memory_sql, memory_sql_through_chat

BIG_CELLS = "SELECT n, repeat('x', 9000000) AS a, repeat('x', 9000000) AS b FROM generate_series(1, 50) n"
WIDE_ROWS = "SELECT " + ", ".join(f"repeat('x', 999000) AS b{i}" for i in range(20)) + " FROM generate_series(1, 30)"
WIDE_COLUMNS = "SELECT " + ", ".join(f"repeat('x', 3000) AS c{i}" for i in range(60)) + " FROM generate_series(1, 200)"
# Ten billion rows counted: far more than a second of work, in one plan node.
SLOW_COUNT = "SELECT count(*) AS name FROM generate_series(1, 100000) a, generate_series(1, 100000) b"
GROWING_CTE = (
    "WITH RECURSIVE r(n, b) AS (SELECT 1, ''::text UNION SELECT n + 1, repeat(md5(n::text), 3000) FROM r) "
    "SELECT count(*) FROM r"
)
LOOPING_UPDATE = (
    "UPDATE memories SET importance = 5 WHERE id IN "
    "(SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b)"
)


def big_cells(target: Target) -> Outcome:
    return memory_sql(target, BIG_CELLS)


def wide_rows(target: Target) -> Outcome:
    return memory_sql(target, WIDE_ROWS)


def wide_columns_through_chat(target: Target) -> Outcome:
    return memory_sql_through_chat(target, WIDE_COLUMNS)


def slow_count(target: Target) -> Outcome:
    return memory_sql(target, SLOW_COUNT)


def growing_cte(target: Target) -> Outcome:
    return memory_sql(target, GROWING_CTE)


def looping_update(target: Target) -> Outcome:
    """The WHERE is run per memory: the attacker first gets one (with none, no WHERE runs)."""
    target.post("/tools/remember", json={"fact": "the attacker remembers something"})
    outcomes = [memory_sql(target, LOOPING_UPDATE) for _ in range(3)]
    return outcomes[-1]


def two_wide_rows(target: Target) -> Outcome:
    return _two_at_once(wide_rows, target)


def two_slow_counts(target: Target) -> Outcome:
    return _two_at_once(slow_count, target)


PG_ATTACKS: list[Attack] = [
    Attack("memory_sql: SELECT of 9 MB cells", big_cells, SQL_DEADLINE_S, ENV),
    Attack("memory_sql: rows of twenty 1 MB cells", wide_rows, SQL_DEADLINE_S, ENV),
    Attack("memory_sql: 60 wide columns x 200 rows, through chat", wide_columns_through_chat, SQL_DEADLINE_S, ENV),
    Attack("memory_sql: a count of ten billion rows", slow_count, SQL_DEADLINE_S, ENV),
    Attack("memory_sql: recursive CTE whose UNION grows", growing_cte, SQL_DEADLINE_S, ENV),
    Attack("memory_sql: 3 UPDATEs whose WHERE loops", looping_update, 3 * SQL_DEADLINE_S, ENV),
    Attack("memory_sql: two SELECTs of 1 MB-cell rows at once", two_wide_rows, 2 * SQL_DEADLINE_S, ENV),
    Attack("memory_sql: two long counts at once", two_slow_counts, 2 * SQL_DEADLINE_S, ENV),
]
