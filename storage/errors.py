"""The storage layer's own errors, the same on every engine.

Each backend translates its driver's errors at the connection boundary (`storage.db` for
sqlite3, `storage.pg_errors` for psycopg), so callers catch these and never a driver's class.
A `StorageFault` is the database refusing for a reason outside the statement (locked, full,
read-only, gone): a 503 that a retry may cure. Any other `StorageError` is a bug in the SQL.
The driver's error stays as `__cause__`; `code` is the engine's own name for it (SQLite's
error name, PostgreSQL's SQLSTATE), for the log.
"""

from __future__ import annotations


class StorageError(Exception):
    """The database failed a statement (a bug in the SQL unless a subclass says otherwise)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class StorageFault(StorageError):
    """Refused for a reason outside the statement: a retry may cure it (HTTP 503)."""


class StorageLocked(StorageFault):
    """Another writer held the lock past the wait (busy, deadlock, no free pooled connection)."""


class StorageFull(StorageFault):
    """No room left: the disk, or the server's resources."""


class StorageReadOnly(StorageFault):
    """The database takes no writes now (a read-only file or filesystem, a standby)."""


class StorageUnavailable(StorageFault):
    """The database cannot be reached or read (I/O error, cannot open, connection lost)."""


class IntegrityViolation(StorageError):
    """A constraint refused the write (unique, foreign key, check, not null)."""


def storage_fault(error: BaseException) -> bool:
    """The database refused for a reason outside the statement (read-only, full, locked, I/O):
    a 503 that a retry may cure, unlike a bug in the SQL."""
    return isinstance(error, StorageFault)
