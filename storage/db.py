"""SQLite connections: lent to a thread while its statements run, never used by two at once.

`Database` knows the file path and how to configure a connection (WAL, busy timeout,
foreign keys, row factory). `thread_connection()` hands each thread a `LentSqlite`, which
borrows a kept connection of the pool (`storage/sqlite_pool.py`) while the thread's request
or turn runs SQL, and gives it back when the turn waits on a model or the request ends:
opening one and, worse, closing the last one (which checkpoints and deletes the WAL file)
would be paid on every request, and a connection per waiting turn would hold its page cache
for nothing. `connection()` opens a private one for CLI commands, jobs and sandboxes.

A kept connection must not outlive a fault of the file. SQLite opens a database it cannot
open for writing (a read-only file or filesystem, an immutable file) read-only without a
word, and such a connection stays read-only after the file is writable again: every write
of its thread would fail until a restart. So each connection (`Connection`) remembers
whether it was opened while the file was not writable, and whether a write failed with any
`SQLITE_READONLY*` code (a read-only open, a file moved or replaced under it, a WAL index it
could not write); the pool closes such a connection and opens a new one at the next
hand-out, once the file is writable again. Service resumes by itself.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from storage.connection import BUSY_TIMEOUT_MS, DbConnection, Migration
from storage.errors import StorageError, StorageLocked
from storage.migrations import MIGRATIONS
from storage.sqlite_backend import SqliteBackend
from storage.sqlite_conn import Connection, translated, writable
from storage.sqlite_pool import LentSqlite, SqlitePool

__all__ = ["BUSY_TIMEOUT_MS", "Connection", "Database", "transaction", "utc_now", "utc_text"]


def utc_now() -> str:
    """ISO-8601 UTC timestamp with millisecond resolution, e.g. 2026-11-22T21:57:49.123Z."""
    return utc_text(datetime.now(UTC))


def utc_text(moment: datetime) -> str:
    """`moment` as stored: UTC, always three digits of milliseconds, `Z`."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
        self._pool = SqlitePool(lambda: self.connect(shared=True), self.path)
        self.backend = SqliteBackend(self.path)

    def thread_connection(self) -> LentSqlite:
        """This thread's connection: it borrows a file connection from the pool at its first
        statement and holds it until `lend_back()` (a turn about to wait) or
        `release_thread_connection()` (the end of the request or turn). A transaction left
        open is rolled back when the connection goes back; a stale one (it cannot write, but a
        new one could) is replaced when it is borrowed (`storage/sqlite_pool.py`)."""
        lent: LentSqlite | None = getattr(self._local, "lent", None)
        if lent is None:
            lent = self._local.lent = LentSqlite(self._pool)
        elif lent.in_transaction:
            lent.execute("ROLLBACK")
        lent.drop_if_stale(self.path)
        return lent

    def release_thread_connection(self) -> None:
        """The request or turn is over: its file connection goes back to the pool."""
        lent: LentSqlite | None = getattr(self._local, "lent", None)
        if lent is not None:
            lent.release()

    def connect(self, *, shared: bool = False) -> Connection:
        """Open a new autocommit connection; transactions are explicit (`transaction()`).
        `shared`: for the pool, whose connections serve one thread at a time, any thread."""
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=not shared,
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
        """Close the pool's idle connections (a lent one goes back, and is closed, later)."""
        self._pool.close()


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
