"""SQLite connections lent to threads while their statements run, from a small pool.

A request or a turn gets its thread's `LentSqlite` (`Database.thread_connection()`): the first
statement borrows a file connection from the `SqlitePool`, `lend_back()` gives it back between
statements (never inside a transaction), and the end of the request or turn releases it
(`Database.release_thread_connection()`). A turn lends its connection back before it waits on
a model or a tool (`storage.connection.lend_back`), as on PostgreSQL: a thousand turns waiting
on their models hold no SQLite connection (and no page cache of one) between them, only the
few the pool keeps idle (issue 38; the figures are in bench/README.md).

A pooled connection is used by one thread at a time (the pool hands it out alone), so it is
opened with `check_same_thread=False`. The pool opens a connection when none is idle and keeps
at most `keep` idle ones (opening one costs a fraction of a millisecond; closing the last one
checkpoints the WAL, which a kept one never does). A connection that could not write but now
could (`Connection.stale`) is replaced when it is borrowed; a transaction left open by a request
that crashed is rolled back when its connection comes back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from storage.sqlite_conn import Connection

KEEP_IDLE = 8  # connections kept for the next borrower


class SqlitePool:
    """Idle SQLite connections of one file, opened by `open_one`, at most `keep` kept."""

    def __init__(self, open_one: Callable[[], Connection], path: str, keep: int = KEEP_IDLE) -> None:
        self._open_one = open_one
        self._path = path
        self._keep = keep
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self.opened = 0  # connections opened in all (tests and the operator)
        self.lent = 0  # connections out now

    def borrow(self) -> Connection:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
            self.lent += 1
        if conn is not None and conn.stale(self._path):
            conn.close()
            conn = None
        if conn is None:
            try:
                conn = self._open_one()
            except BaseException:
                with self._lock:
                    self.lent -= 1
                raise
            with self._lock:
                self.opened += 1
        return conn

    def give_back(self, conn: Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except Exception:
                conn.close()
                conn = None  # type: ignore[assignment]
        with self._lock:
            self.lent -= 1
            if conn is not None and len(self._idle) < self._keep:
                self._idle.append(conn)
                return
        if conn is not None:
            conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class LentSqlite:
    """A thread's `DbConnection` on SQLite, holding a file connection only while it works."""

    def __init__(self, pool: SqlitePool) -> None:
        self._pool = pool
        self._conn: Connection | None = None

    def _borrowed(self) -> Connection:
        if self._conn is None:
            self._conn = self._pool.borrow()
        return self._conn

    @property
    def in_transaction(self) -> bool:
        return self._conn is not None and self._conn.in_transaction

    @property
    def held(self) -> Connection | None:
        """The file connection this thread holds now (None between statements of a waiting turn)."""
        return self._conn

    def drop_if_stale(self, path: str) -> None:
        """Give back a held connection that can no longer write where a new one could (the pool
        replaces it at the next borrow)."""
        if self._conn is not None and not self._conn.in_transaction and self._conn.stale(path):
            self.release()

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self._borrowed().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> Any:
        return self._borrowed().executemany(sql, parameters)

    def executescript(self, script: str, /) -> Any:
        return self._borrowed().executescript(script)

    def lend_back(self) -> None:
        """Outside a transaction: the file connection goes back to the pool for now."""
        if self._conn is not None and not self._conn.in_transaction:
            self.release()

    def release(self) -> None:
        """Back to the pool whatever its state (an open transaction is rolled back there)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.give_back(conn)

    def close(self) -> None:
        self.release()

    def __getattr__(self, name: str) -> Any:
        """What else a `sqlite3.Connection` offers (`set_authorizer`, `total_changes`…), on
        the connection this thread holds now."""
        return getattr(self._borrowed(), name)
