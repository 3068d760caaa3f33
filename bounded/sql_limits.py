"""SQLite's own limits for one untrusted statement, set on the worker's connection.

These bound what one statement can build inside the engine, where no progress handler
reaches: `LENGTH` caps any one string or blob (no megabyte `zeroblob()`/`printf()` cell),
`COLUMN` the width of a result row, `hard_heap_limit` every byte SQLite allocates (sorters,
the dedupe index of a recursive `UNION`, materialised blobs; `temp_store = MEMORY` keeps
temporary tables under that limit instead of in files on disk). Together they bound the
memory of one row as Python fetches it: at most `heap_bytes` in SQLite plus as much again
in Python objects. The worker process has a hard address-space limit on top (`bounded.child`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

MB = 1024 * 1024


@dataclass(frozen=True)
class EngineLimits:
    value_bytes: int  # SQLITE_LIMIT_LENGTH: the largest string or blob
    heap_bytes: int = 16 * MB  # PRAGMA hard_heap_limit: every allocation of SQLite in this worker
    columns: int = 64  # SQLITE_LIMIT_COLUMN: result columns (and table columns in a setup script)
    sql_bytes: int = 100_000  # SQLITE_LIMIT_SQL_LENGTH, set after any trusted setup script
    like_pattern_bytes: int = 1000  # SQLITE_LIMIT_LIKE_PATTERN_LENGTH (default 50,000)
    expr_depth: int = 200  # SQLITE_LIMIT_EXPR_DEPTH (default 1000)
    compound_select: int = 50  # SQLITE_LIMIT_COMPOUND_SELECT (default 500)
    function_args: int = 64  # SQLITE_LIMIT_FUNCTION_ARG (default 127)
    variables: int = 100  # SQLITE_LIMIT_VARIABLE_NUMBER: the statement has no parameters


def apply_heap_limit(conn: sqlite3.Connection, limits: EngineLimits) -> None:
    """Process-wide in SQLite; the worker runs one job at a time, so it is this job's limit."""
    conn.execute(f"PRAGMA hard_heap_limit = {int(limits.heap_bytes)}")
    conn.execute("PRAGMA temp_store = MEMORY")


def apply_statement_limits(conn: sqlite3.Connection, limits: EngineLimits) -> None:
    """The per-connection limits for the untrusted statement (after any trusted setup)."""
    for limit, value in (
        (sqlite3.SQLITE_LIMIT_LENGTH, limits.value_bytes),
        (sqlite3.SQLITE_LIMIT_COLUMN, limits.columns),
        (sqlite3.SQLITE_LIMIT_SQL_LENGTH, limits.sql_bytes),
        (sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, limits.like_pattern_bytes),
        (sqlite3.SQLITE_LIMIT_EXPR_DEPTH, limits.expr_depth),
        (sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, limits.compound_select),
        (sqlite3.SQLITE_LIMIT_FUNCTION_ARG, limits.function_args),
        (sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limits.variables),
        (sqlite3.SQLITE_LIMIT_ATTACHED, 0),
        (sqlite3.SQLITE_LIMIT_WORKER_THREADS, 0),
    ):
        conn.setlimit(limit, value)
