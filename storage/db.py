"""SQLite connections: one per thread, never shared between threads.

`Database` knows the file path and how to configure a connection (WAL, busy timeout,
foreign keys, row factory). `thread_connection()` hands each thread its own connection and
keeps it for the thread's next request: opening one and, worse, closing the last one
(which checkpoints and deletes the WAL file) would be paid on every request.
`connection()` opens a private one for CLI commands, jobs and sandboxes.

A kept connection must not outlive a fault of the file. SQLite opens a database it cannot
open for writing (a read-only file or filesystem, an immutable file) read-only without a
word, and such a connection stays read-only after the file is writable again: every write
of its thread would fail until a restart. So each connection (`Connection`) remembers
whether it was opened while the file was not writable, and whether a write failed with any
`SQLITE_READONLY*` code (a read-only open, a file moved or replaced under it, a WAL index it
could not write); `thread_connection()` closes such a connection and opens a new one at the
next hand-out, once the file is writable again. Service resumes by itself.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from storage.connection import BUSY_TIMEOUT_MS, DbConnection, Migration
from storage.errors import (
    IntegrityViolation,
    StorageError,
    StorageFull,
    StorageLocked,
    StorageReadOnly,
    StorageUnavailable,
)
from storage.migrations import MIGRATIONS
from storage.sqlite_backend import SqliteBackend

__all__ = ["BUSY_TIMEOUT_MS", "Connection", "Database", "transaction", "utc_now", "utc_text"]


def utc_now() -> str:
    """ISO-8601 UTC timestamp with millisecond resolution, e.g. 2026-11-22T21:57:49.123Z."""
    return utc_text(datetime.now(UTC))


def utc_text(moment: datetime) -> str:
    """`moment` as stored: UTC, always three digits of milliseconds, `Z`."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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


def _enable_wal(conn: Connection) -> None:
    """`PRAGMA journal_mode = WAL`, retried while another process holds the file: switching a
    fresh file to WAL needs an exclusive lock, and SQLite answers SQLITE_BUSY at once there,
    without its busy handler (seen with six servers starting at once on one new database)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except StorageLocked as error:
            if not error.code.startswith("SQLITE_BUSY") or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class Database:
    """Factory of configured connections to one SQLite file (a `storage.connection.Store`)."""

    dialect: Literal["sqlite"] = "sqlite"

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._local = threading.local()
        self.backend = SqliteBackend(self.path)

    def thread_connection(self) -> Connection:
        """This thread's own connection, opened on first use and then reused.

        A connection handed back with a transaction still open (a request that crashed
        mid-way) is rolled back first, so no request inherits another's transaction. A
        stale one (it cannot write, but a new one could) is replaced.
        """
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None and conn.stale(self.path):
            self._local.conn = None
            conn.close()
            conn = None
        if conn is None:
            conn = self._local.conn = self.connect()
        elif conn.in_transaction:
            conn.execute("ROLLBACK")
        return conn

    def release_thread_connection(self) -> None:
        """Kept: opening a SQLite connection (and closing the last one) is not free."""

    def connect(self) -> Connection:
        """Open a new autocommit connection; transactions are explicit (`transaction()`)."""
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=True,
                timeout=BUSY_TIMEOUT_MS / 1000,
                factory=Connection,
            )
        except sqlite3.Error as error:
            raise translated(error) from error
        conn.opened_read_only = not writable(self.path)
        conn.row_factory = sqlite3.Row
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
            _enable_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
        except StorageError:
            conn.close()
            raise
        return conn

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A connection for the duration of a `with` block (CLI commands, background jobs)."""
        conn = self.connect()
        try:
            yield conn
        finally:
            conn.close()

    def migrate(self, migrations: Sequence[Migration] | None = None) -> list[str]:
        """Bring the schema up to date (each step's SQLite DDL); returns the steps applied now."""
        with self.connection() as conn:
            return self.backend.migrate(conn, MIGRATIONS if migrations is None else migrations)

    def close(self) -> None:
        """Nothing to release: each thread's connection closes with its thread."""


@contextmanager
def transaction(conn: DbConnection, *, immediate: bool = True) -> Iterator[DbConnection]:
    """BEGIN … COMMIT, or ROLLBACK on any exception.

    IMMEDIATE takes the write lock up front, so two writers wait on the busy timeout
    instead of failing half-way with SQLITE_BUSY on lock upgrade. (PostgreSQL locks rows as
    it writes them: there `BEGIN IMMEDIATE` is a plain `BEGIN`, see `storage.pg_sql`.)
    """
    conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
