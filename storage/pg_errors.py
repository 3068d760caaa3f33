"""PostgreSQL's errors as the storage layer's own (`storage.errors`).

A psycopg error (or the pool's timeout) is translated at the connection boundary
(`storage.pg_connection`, `storage.pg`) into the class its SQLSTATE amounts to: a lock not
had, a full disk, a read-only server, a server gone, a constraint. So `except StorageError`,
`storage_fault()` and the 503 handler serve both engines. The original error stays as
`__cause__`, and its SQLSTATE in `code`.
"""

from __future__ import annotations

import psycopg
import psycopg_pool

from storage.errors import (
    IntegrityViolation,
    StorageError,
    StorageFull,
    StorageLocked,
    StorageReadOnly,
    StorageUnavailable,
)

# SQLSTATE (exact, then its two-character class) -> our class
_BY_STATE: dict[str, type[StorageError]] = {
    "25006": StorageReadOnly,  # read_only_sql_transaction (standby, read-only role)
    "53100": StorageFull,  # disk_full
    "55P03": StorageLocked,  # lock_not_available (lock_timeout)
    "40P01": StorageLocked,  # deadlock_detected
    "40001": StorageLocked,  # serialization_failure
    "57014": StorageError,  # query_canceled (statement_timeout): the statement's, not the server's
}
_BY_CLASS: dict[str, type[StorageError]] = {
    "23": IntegrityViolation,  # integrity constraint violation
    "08": StorageUnavailable,  # connection exception
    "53": StorageFull,  # insufficient resources (disk, memory, connections)
    "57": StorageUnavailable,  # operator intervention (shutdown, crash)
    "58": StorageUnavailable,  # system error (I/O)
    "22": StorageError,  # data exception
    "42": StorageError,  # syntax error or access rule violation: a bug
}


def translated(error: BaseException) -> StorageError:
    """Our error standing for `error` (a psycopg or pool error), cause attached."""
    cls: type[StorageError]
    if isinstance(error, psycopg_pool.PoolTimeout):
        cls, state = StorageLocked, ""
    else:
        state = str(getattr(error, "sqlstate", None) or "")
        cls = _BY_STATE.get(state) or _BY_CLASS.get(state[:2]) or _fallback(error)
    mapped = cls(str(error).strip() or type(error).__name__, state)
    mapped.__cause__ = error
    return mapped


def _fallback(error: BaseException) -> type[StorageError]:
    """No SQLSTATE (a connection that failed or broke on the client side) or an unlisted one."""
    if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        return StorageUnavailable
    if isinstance(error, psycopg.IntegrityError):
        return IntegrityViolation
    return StorageError
