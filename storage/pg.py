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

`PgConnection` makes a psycopg connection read like `sqlite3.Connection` to the storage
modules: autocommit with explicit BEGIN/COMMIT, `?` placeholders (`storage.pg_sql`), rows
by name and index (`PgRow`, like `sqlite3.Row`), errors as sqlite3's DB-API classes
(`storage.pg_errors`).
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal, overload

import psycopg
import psycopg_pool
from psycopg.pq import TransactionStatus
from psycopg.rows import RowMaker

from storage.connection import Migration
from storage.db import BUSY_TIMEOUT_MS
from storage.pg_errors import translated
from storage.pg_sql import WRITE_LOCK, pg_sql, takes_write_lock

POOL_TIMEOUT_S = 10.0  # waiting longer for a free connection is a 503 (SQLITE_BUSY), not a hang
CONNECT_TIMEOUT_S = 5


class PgRow:
    """One result row, read by column name or index, iterated as values (like `sqlite3.Row`)."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: Sequence[Any], index: dict[str, int]) -> None:
        self._values = tuple(values)
        self._index = index

    @overload
    def __getitem__(self, key: int | str) -> Any: ...
    @overload
    def __getitem__(self, key: slice) -> tuple[Any, ...]: ...
    def __getitem__(self, key: int | str | slice) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def keys(self) -> list[str]:
        return list(self._index)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PgRow):
            return self._values == other._values and self._index == other._index
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"PgRow({dict(zip(self._index, self._values, strict=True))!r})"


def pg_row(cursor: psycopg.Cursor[Any]) -> RowMaker[PgRow]:
    """psycopg row factory making `PgRow`s (column index computed once per result)."""
    index = {column.name: i for i, column in enumerate(cursor.description or ())}

    def make(values: Sequence[Any]) -> PgRow:
        return PgRow(values, index)

    return make


class PgCursor:
    """The result of one statement, fully fetched (so the server connection is free at once)."""

    def __init__(self, rows: list[PgRow], rowcount: int) -> None:
        self._rows = rows
        self._next = 0
        self._rowcount = rowcount

    @property
    def rowcount(self) -> int:
        return self._rowcount

    def fetchone(self) -> PgRow | None:
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._rows[self._next - 1]

    def fetchall(self) -> list[PgRow]:
        rest = self._rows[self._next :]
        self._next = len(self._rows)
        return rest

    def __iter__(self) -> Iterator[PgRow]:
        return iter(self.fetchall())


class PgConnection:
    """A psycopg connection speaking the storage layer's `DbConnection` (see module doc)."""

    dialect: Literal["postgresql"] = "postgresql"

    def __init__(self, raw: psycopg.Connection[PgRow]) -> None:
        self.raw = raw
        self.released = False  # handed back to the pool: this wrapper must not touch it again

    @property
    def in_transaction(self) -> bool:
        if self.released:  # the server connection is someone else's now
            return False
        return self.raw.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)

    @property
    def broken(self) -> bool:
        """The server connection is gone (closed, or lost mid-way): a new one is needed."""
        return self.raw.closed or self.raw.info.transaction_status == TransactionStatus.UNKNOWN

    def _usable(self) -> None:
        if self.released or self.raw.closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")

    def execute(self, sql: str, parameters: Any = (), /) -> PgCursor:
        self._usable()
        try:
            with self.raw.cursor() as cursor:
                cursor.execute(pg_sql(sql), _params(parameters), prepare=False)
                if takes_write_lock(sql):  # SQLite's one-writer-at-a-time, across every process
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                rows = cursor.fetchall() if cursor.description is not None else []
                return PgCursor(rows, cursor.rowcount)
        except psycopg.Error as error:
            raise translated(error) from error

    def executemany(self, sql: str, parameters: Any, /) -> PgCursor:
        self._usable()
        try:
            with self.raw.cursor() as cursor:
                cursor.executemany(pg_sql(sql), [_params(p) for p in parameters])
                return PgCursor([], cursor.rowcount)
        except psycopg.Error as error:
            raise translated(error) from error

    def script(self, sql: str) -> None:
        """Run PostgreSQL DDL as written (no placeholder rewriting: `$$` bodies, `%` in it)."""
        try:
            self.raw.execute(sql.encode(), prepare=False)
        except psycopg.Error as error:
            raise translated(error) from error

    def commit(self) -> None:
        """As `sqlite3.Connection.commit`: ends an open transaction, else does nothing."""
        if self.in_transaction:
            self.execute("COMMIT")

    def rollback(self) -> None:
        if self.in_transaction:
            self.execute("ROLLBACK")

    def close(self) -> None:
        self.raw.close()


class LentConnection:
    """A thread's `DbConnection` on PostgreSQL, holding a server connection only while it works.

    The first statement borrows one from the pool; `lend_back()` gives it back between
    statements (never inside a transaction), and the next statement borrows again. A turn
    lends its connection back before it waits on a model or a tool (`storage.connection.lend_back`),
    so it holds one for its few milliseconds of SQL, not for the minutes its model may take.
    """

    dialect: Literal["postgresql"] = "postgresql"

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


def _params(parameters: Any) -> Sequence[Any] | Mapping[str, Any]:
    """sqlite3 takes any sequence (or a mapping for `:name`); psycopg wants a tuple or a dict."""
    if parameters is None:
        return ()
    if isinstance(parameters, Mapping):
        return {key: _value(value) for key, value in parameters.items()}
    return tuple(_value(value) for value in parameters)


def _value(value: Any) -> Any:
    """PostgreSQL's text cannot hold NUL (SQLite's can): a NUL in a text value is stored as
    U+FFFD, as a lone surrogate already is, instead of failing the whole write."""
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\ufffd")
    return value


def _configure(raw: psycopg.Connection[Any]) -> None:
    raw.autocommit = True
    raw.row_factory = pg_row
    # Values are merged into the statement by psycopg (quoted by libpq's rules), not bound
    # server-side: SQLite's loosely typed `? IS NULL OR name = ?` has no type for a bare NULL
    # parameter in PostgreSQL's extended protocol, and the storage SQL is one copy for both.
    raw.cursor_factory = psycopg.ClientCursor
    # as SQLite's busy timeout: a lock (a row, the write lock) not had in 5 s is SQLITE_BUSY, a 503
    raw.execute(f"SET lock_timeout = {BUSY_TIMEOUT_MS}")


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
            configure=_configure,
            check=psycopg_pool.ConnectionPool.check_connection,
            timeout=POOL_TIMEOUT_S,
            open=False,
            name="app",
        )
        self._opened = False
        self._open_lock = threading.Lock()

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
        try:
            raw: psycopg.Connection[Any] = psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as error:
            raise translated(error) from error
        _configure(raw)
        return PgConnection(raw)

    @contextmanager
    def connection(self) -> Iterator[PgConnection]:
        """A pooled connection for the duration of a `with` block (CLI commands, jobs)."""
        conn = self._checkout()
        try:
            yield conn
        finally:
            self._checkin(conn)

    def migrate(self, migrations: Sequence[Migration] | None = None) -> list[str]:
        """Bring the schema up to date (PostgreSQL DDL, the same migration names)."""
        from storage.pg_migrations import PG_MIGRATIONS, migrate_pg

        with self.connection() as conn:
            return migrate_pg(conn, PG_MIGRATIONS if migrations is None else migrations)

    def close(self) -> None:
        """Close the pool and every connection in it (tests, CLI commands on exit)."""
        self._pool.close()


class _Held:
    """A thread's connection; its server connection goes back to the pool when the
    thread-local dies (a thread that ended without `release_thread_connection`)."""

    def __init__(self, conn: LentConnection) -> None:
        self.conn = conn
        weakref.finalize(self, conn.release)
