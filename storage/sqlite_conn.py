"""A SQLite connection of ours: it notices when it can no longer write, and raises the storage
layer's errors (`storage.errors`) instead of sqlite3's (see `storage/db.py` for why).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from storage.errors import (
    IntegrityViolation,
    StorageError,
    StorageFull,
    StorageLocked,
    StorageReadOnly,
    StorageUnavailable,
)


class Cursor(sqlite3.Cursor):
    """A `sqlite3.Cursor` whose fetches raise the storage layer's errors (iterating one does
    not: a step of a query that already returned its first row seldom fails)."""

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.Error as error:
            raise translated(error) from error

    def fetchmany(self, size: int | None = 1) -> list[Any]:
        try:
            return super().fetchmany(size)
        except sqlite3.Error as error:
            raise translated(error) from error

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.Error as error:
            raise translated(error) from error


class Connection(sqlite3.Connection):
    """A `sqlite3.Connection` that notices when it can no longer write (see the module doc),
    and raises the storage layer's errors (`storage.errors`) instead of sqlite3's.

    `execute`, `executemany` and `executescript` (every statement of the storage layer,
    `COMMIT` included) note a `SQLITE_READONLY*` failure before raising it as ours.
    """

    opened_read_only = False  # the file was not writable right after the open
    write_refused = False  # a statement failed with a SQLITE_READONLY* code

    def stale(self, path: str) -> bool:
        """True when a new connection would write where this one cannot (while the file stays
        read-only, the connection is kept: reads work, and reopening would change nothing)."""
        return (self.write_refused or self.opened_read_only) and writable(path)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            return self.cursor(Cursor).execute(sql, parameters)
        except sqlite3.Error as error:
            self._note(error)
            raise translated(error) from error

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        try:
            return self.cursor(Cursor).executemany(sql, parameters)
        except sqlite3.Error as error:
            self._note(error)
            raise translated(error) from error

    def executescript(self, script: str, /) -> sqlite3.Cursor:
        try:
            return super().executescript(script)
        except sqlite3.Error as error:
            self._note(error)
            raise translated(error) from error

    def _note(self, error: sqlite3.Error) -> None:
        if refused_as_read_only(error):
            self.write_refused = True


def refused_as_read_only(error: sqlite3.Error) -> bool:
    """SQLITE_READONLY and its extended codes (RECOVERY, CANTLOCK, ROLLBACK, DBMOVED, CANTINIT, DIRECTORY)."""
    return str(getattr(error, "sqlite_errorname", "")).startswith("SQLITE_READONLY")


# SQLite's error name (its prefix: extended codes included) -> our class; the rest are bugs
_BY_NAME: tuple[tuple[str, type[StorageError]], ...] = (
    ("SQLITE_READONLY", StorageReadOnly),
    ("SQLITE_FULL", StorageFull),
    ("SQLITE_BUSY", StorageLocked),
    ("SQLITE_LOCKED", StorageLocked),
    ("SQLITE_IOERR", StorageUnavailable),
    ("SQLITE_CANTOPEN", StorageUnavailable),
    ("SQLITE_CONSTRAINT", IntegrityViolation),
)


def translated(error: sqlite3.Error) -> StorageError:
    """Our error standing for a sqlite3 one (by its `sqlite_errorname`), cause attached."""
    name = str(getattr(error, "sqlite_errorname", "") or "")
    cls: type[StorageError] = StorageError
    for prefix, mapped in _BY_NAME:
        if name.startswith(prefix):
            cls = mapped
            break
    else:
        if isinstance(error, sqlite3.IntegrityError):
            cls = IntegrityViolation
    ours = cls(str(error) or type(error).__name__, name)
    ours.__cause__ = error
    return ours


def writable(path: str) -> bool:
    """Could the file be opened for writing now? (Read-only filesystems and immutable files
    refuse root too; a missing file is not writable.)"""
    return path == ":memory:" or os.access(path, os.W_OK)
