"""PostgreSQL errors as the DB-API classes the storage layer already handles.

The app catches `sqlite3.Error` around turns, `sqlite3.IntegrityError` for a duplicate user,
and answers 503 for `sqlite3.OperationalError`s that `storage_fault()` recognises by their
`sqlite_errorname`. A psycopg error is translated into the same class with the
`sqlite_errorname` of the SQLite fault it amounts to (SQLSTATE class → name), so every one of
those handlers works on both backends unchanged. The original error stays as `__cause__`,
and its SQLSTATE in `pg_sqlstate`.
"""

from __future__ import annotations

import sqlite3

import psycopg
import psycopg_pool

# SQLSTATE (exact, then its two-character class) -> (DB-API class, SQLite error name)
_BY_STATE: dict[str, tuple[type[sqlite3.Error], str]] = {
    "25006": (sqlite3.OperationalError, "SQLITE_READONLY"),  # read_only_sql_transaction (standby, read-only role)
    "53100": (sqlite3.OperationalError, "SQLITE_FULL"),  # disk_full
    "55P03": (sqlite3.OperationalError, "SQLITE_BUSY"),  # lock_not_available (lock_timeout)
    "40P01": (sqlite3.OperationalError, "SQLITE_BUSY"),  # deadlock_detected
    "40001": (sqlite3.OperationalError, "SQLITE_BUSY"),  # serialization_failure
    "57014": (sqlite3.OperationalError, "SQLITE_INTERRUPT"),  # query_canceled (statement_timeout)
}
_BY_CLASS: dict[str, tuple[type[sqlite3.Error], str]] = {
    "23": (sqlite3.IntegrityError, "SQLITE_CONSTRAINT"),  # integrity constraint violation
    "08": (sqlite3.OperationalError, "SQLITE_IOERR"),  # connection exception
    "53": (sqlite3.OperationalError, "SQLITE_FULL"),  # insufficient resources (disk, memory, connections)
    "57": (sqlite3.OperationalError, "SQLITE_IOERR"),  # operator intervention (shutdown, crash)
    "58": (sqlite3.OperationalError, "SQLITE_IOERR"),  # system error (I/O)
    "22": (sqlite3.DataError, "SQLITE_MISMATCH"),  # data exception
    "42": (sqlite3.OperationalError, "SQLITE_ERROR"),  # syntax error or access rule violation: a bug
}


def translated(error: BaseException) -> sqlite3.Error:
    """The DB-API error standing for `error` (a psycopg or pool error), cause attached."""
    cls: type[sqlite3.Error]
    if isinstance(error, psycopg_pool.PoolTimeout):
        cls, name, state = sqlite3.OperationalError, "SQLITE_BUSY", ""
    else:
        state = str(getattr(error, "sqlstate", None) or "")
        cls, name = _BY_STATE.get(state) or _BY_CLASS.get(state[:2]) or _fallback(error)
    mapped = cls(str(error).strip() or type(error).__name__)
    mapped.sqlite_errorname = name
    mapped.pg_sqlstate = state  # type: ignore[attr-defined]
    mapped.__cause__ = error
    return mapped


def _fallback(error: BaseException) -> tuple[type[sqlite3.Error], str]:
    """No SQLSTATE (a connection that failed or broke on the client side) or an unlisted one."""
    if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        return sqlite3.OperationalError, "SQLITE_IOERR"
    if isinstance(error, psycopg.IntegrityError):
        return sqlite3.IntegrityError, "SQLITE_CONSTRAINT"
    if isinstance(error, psycopg.ProgrammingError):
        return sqlite3.ProgrammingError, "SQLITE_MISUSE"
    return sqlite3.DatabaseError, "SQLITE_ERROR"
