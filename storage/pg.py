"""PostgreSQL as the app's database (`DATABASE_URL=postgresql://…`), behind `DbConnection`.

`PgDatabase` owns a psycopg_pool `ConnectionPool` (at most `DATABASE_POOL_SIZE` server
connections). Like the SQLite `Database` it hands each thread its own connection
(`thread_connection`), a `LentConnection`: it borrows a server connection at its first
statement and lends it back when the thread is about to wait (`lend_back`: a turn before its
model call or its tool) and when the request or turn ends (`release_thread_connection`). So
the pool bounds the statements and transactions running at one moment, not the turns: a
few server connections serve hundreds of turns that are mostly waiting on their models. Jobs and CLI commands take private ones (`connection()`, returned to the pool
after the block). A kept connection that broke
(the server restarted, the network dropped) is replaced at the next hand-out, as SQLite's
stale read-only connection is: service resumes by itself.

Each server connection is a `storage.pg_connection.PgConnection` (reads like
`sqlite3.Connection` to the storage modules). The store's `backend` is `PgBackend`: what
PostgreSQL does its own way (search, `/memory_sql`, migrations, the probe's lock wait).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import psycopg
import psycopg_pool

from storage.connection import Migration
from storage.migrations import MIGRATIONS
from storage.pg_backend import PgBackend
from storage.pg_connection import CONNECT_TIMEOUT_S, PgConnection, PgCursor, configure, connect_pg
from storage.pg_errors import translated

POOL_TIMEOUT_S = 10.0  # waiting longer for a free connection is a 503 (StorageLocked), not a hang


class LentConnection:
    """A thread's `DbConnection` on PostgreSQL, holding a server connection only while it works.

    The first statement borrows one from the pool; `lend_back()` gives it back between
    statements (never inside a transaction), and the next statement borrows again. A turn
    lends its connection back before it waits on a model or a tool (`storage.connection.lend_back`),
    so it holds one while its SQL runs, not while its model thinks.
    """

    def __init__(self, database: PgDatabase) -> None:
        self._database = database
        self._conn: PgConnection | None = None

    def _borrowed(self) -> PgConnection:
        if self._conn is not None and self._conn.broken:
            self.release()
        if self._conn is None:
            self._conn = self._database._checkout()
        return self._conn

    @property
    def in_transaction(self) -> bool:
        return self._conn is not None and self._conn.in_transaction

    def execute(self, sql: str, parameters: Any = (), /) -> PgCursor:
        return self._borrowed().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> PgCursor:
        return self._borrowed().executemany(sql, parameters)

    def commit(self) -> None:
        if self._conn is not None:
            self._conn.commit()

    def rollback(self) -> None:
        if self._conn is not None:
            self._conn.rollback()

    def lend_back(self) -> None:
        """Outside a transaction: the server connection goes back to the pool for now."""
        if self._conn is not None and not self._conn.in_transaction:
            self.release()

    def release(self) -> None:
        """Back to the pool whatever its state (an open transaction is rolled back there)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._database._checkin(conn)

    def close(self) -> None:
        self.release()


class PgDatabase:
    """Factory of connections to one PostgreSQL database, through a bounded pool.

    A thread's `LentConnection` holds a server connection from its first statement until it
    lends it back (a turn about to wait) or `release_thread_connection()` at the end of the
    request or turn (api/database.py's teardown, the turn runner); a statement that needs one
    while all are held waits up to POOL_TIMEOUT_S, then gets a storage fault (503)."""

    dialect: Literal["postgresql"] = "postgresql"
    path = ""  # no local file: /health reports no free bytes for a server

    def __init__(self, url: str, *, pool_size: int = 10) -> None:
        self.url = url
        self.pool_size = pool_size
        self._local = threading.local()
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = psycopg_pool.ConnectionPool(
            url,
            min_size=0,
            max_size=pool_size,
            kwargs={"connect_timeout": CONNECT_TIMEOUT_S},
            configure=configure,
            check=psycopg_pool.ConnectionPool.check_connection,
            timeout=POOL_TIMEOUT_S,
            open=False,
            name="app",
        )
        self._opened = False
        self._open_lock = threading.Lock()
        self.backend = PgBackend(self)

    def _checkout(self) -> PgConnection:
        with self._open_lock:
            if not self._opened:
                self._pool.open(wait=False)
                self._opened = True
        try:
            raw = self._pool.getconn()
        except (psycopg.Error, psycopg_pool.PoolTimeout) as error:
            raise translated(error) from error
        return PgConnection(raw)

    def _checkin(self, conn: PgConnection) -> None:
        """Back to the pool (a broken one is discarded by the pool; an open transaction rolled back)."""
        conn.released = True
        if self._pool.closed:
            conn.raw.close()
            return
        self._pool.putconn(conn.raw)

    def thread_connection(self) -> LentConnection:
        """This thread's connection, kept until `release_thread_connection()` (or the thread's
        end); a transaction left open is rolled back, a broken server connection replaced at
        the next statement."""
        holder: _Held | None = getattr(self._local, "held", None)
        if holder is None:
            holder = self._local.held = _Held(LentConnection(self))
        elif holder.conn.in_transaction:
            holder.conn.execute("ROLLBACK")
        return holder.conn

    def release_thread_connection(self) -> None:
        """Back to the pool at the end of a request or turn (rolled back if left open)."""
        holder: _Held | None = getattr(self._local, "held", None)
        if holder is not None:
            holder.conn.release()

    def connect(self) -> PgConnection:
        """A new connection outside the pool, the caller's to close (the health probe's "as the
        next request would connect", tests)."""
        return connect_pg(self.url)

    @contextmanager
    def connection(self) -> Iterator[PgConnection]:
        """A pooled connection for the duration of a `with` block (CLI commands, jobs)."""
        conn = self._checkout()
        try:
            yield conn
        finally:
            self._checkin(conn)

    def migrate(self, migrations: Sequence[Migration] | None = None) -> list[str]:
        """Bring the schema up to date (each step's PostgreSQL DDL, recorded by the same names)."""
        with self.connection() as conn:
            return self.backend.migrate(conn, MIGRATIONS if migrations is None else migrations)

    def close(self) -> None:
        """Close the pool and every connection in it (tests, CLI commands on exit)."""
        self._pool.close()


class _Held:
    """A thread's connection; its server connection goes back to the pool when the
    thread-local dies (a thread that ended without `release_thread_connection`)."""

    def __init__(self, conn: LentConnection) -> None:
        self.conn = conn
        weakref.finalize(self, conn.release)
