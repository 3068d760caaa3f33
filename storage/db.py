"""SQLite connections: one per thread, never shared between threads.

`Database` knows the file path and how to configure a connection (WAL, busy timeout,
foreign keys, row factory). `thread_connection()` hands each thread its own connection and
keeps it for the thread's next request: opening one and, worse, closing the last one
(which checkpoints and deletes the WAL file) would cost milliseconds per request.
`connection()` opens a private one for CLI commands, jobs and sandboxes.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from storage.migrations import migrate

BUSY_TIMEOUT_MS = 5000


def utc_now() -> str:
    """ISO-8601 UTC timestamp with millisecond resolution, e.g. 2026-11-22T21:57:49.123Z."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Database:
    """Factory of configured connections to one SQLite file."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._local = threading.local()

    def thread_connection(self) -> sqlite3.Connection:
        """This thread's own connection, opened on first use and then reused.

        A connection handed back with a transaction still open (a request that crashed
        mid-way) is rolled back first, so no request inherits another's transaction.
        """
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.connect()
        elif conn.in_transaction:
            conn.execute("ROLLBACK")
        return conn

    def connect(self) -> sqlite3.Connection:
        """Open a new autocommit connection; transactions are explicit (`transaction()`)."""
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=True, timeout=BUSY_TIMEOUT_MS / 1000
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection for the duration of a `with` block (CLI commands, background jobs)."""
        conn = self.connect()
        try:
            yield conn
        finally:
            conn.close()

    def migrate(self) -> list[str]:
        """Bring the schema up to date; returns the migrations applied now."""
        with self.connection() as conn:
            return migrate(conn)


@contextmanager
def transaction(conn: sqlite3.Connection, *, immediate: bool = True) -> Iterator[sqlite3.Connection]:
    """BEGIN … COMMIT, or ROLLBACK on any exception.

    IMMEDIATE takes the write lock up front, so two writers wait on the busy timeout
    instead of failing half-way with SQLITE_BUSY on lock upgrade.
    """
    conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
