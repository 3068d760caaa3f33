"""SQLite connections: one per request or thread, never shared.

`Database` only knows the file path and how to configure a fresh connection (WAL, busy
timeout, foreign keys, row factory). Callers own the connection they open and close it;
Flask keeps one per request on `g` (see `api/database.py`).
"""

from __future__ import annotations

import sqlite3
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
