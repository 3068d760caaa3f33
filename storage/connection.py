"""The one connection interface the storage layer is written against, for both backends.

`sqlite3.Connection` (the embedded default) satisfies `DbConnection` as it is; a PostgreSQL
connection is wrapped by `storage.pg.PgConnection` so that it does too: `?` placeholders,
rows readable by name and by index, `in_transaction`, and errors raised as the DB-API classes
of the `sqlite3` module (with a `sqlite_errorname`) so that one `except sqlite3.Error`,
`storage_fault()` and the 503 handler serve both. So each storage module is one copy of SQL
that both engines accept (`INSERT … RETURNING id`, `ON CONFLICT`); what truly differs (full
text search, the schema's DDL, the health probe) is chosen by `dialect`, in the module of
that feature.

`Store` is what the app holds: a factory of such connections (`storage.db.Database` for a
SQLite file, `storage.pg.PgDatabase` for a server), picked from `DATABASE_URL` by
`storage.open.open_store`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol

Dialect = Literal["sqlite", "postgresql"]


class DbRow(Protocol):
    """A result row: by column name or index, and iterable over its values (`sqlite3.Row`, `PgRow`)."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> list[str]: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...


class DbCursor(Protocol):
    """What callers read from `execute`: rows (by name or index), one or all, and `rowcount`."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class DbConnection(Protocol):
    """An autocommit connection with explicit `BEGIN`/`COMMIT`/`ROLLBACK` (see `transaction`)."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, parameters: Any = (), /) -> DbCursor: ...

    def executemany(self, sql: str, parameters: Any, /) -> DbCursor: ...

    def close(self) -> None: ...


class Store(Protocol):
    """A database the app uses: per-thread connections for requests, private ones for jobs."""

    @property
    def dialect(self) -> Dialect: ...

    @property
    def path(self) -> str:
        """The SQLite file ('' for a database server: no local file to watch)."""
        ...

    def thread_connection(self) -> DbConnection: ...

    def release_thread_connection(self) -> None:
        """The request or turn of this thread is over (SQLite keeps the thread's connection for
        its next one; PostgreSQL hands it back to the pool, so idle threads hold none)."""
        ...

    def connect(self) -> DbConnection: ...

    def connection(self) -> AbstractContextManager[DbConnection]: ...

    def migrate(self, migrations: Sequence[Migration] = ...) -> list[str]: ...

    def close(self) -> None:
        """Release what the store holds open across requests (PostgreSQL: its pool)."""
        ...


def inserted_id(cursor: DbCursor) -> int:
    """The id of an `INSERT … RETURNING id` (both engines; no `lastrowid` on PostgreSQL). Reads
    the cursor to its end, so SQLite finishes the statement (and frees its lock) right away."""
    rows = cursor.fetchall()
    return int(rows[0][0])


Migration = Callable[[DbConnection], None]
"""A named schema step (`storage.migrations` for SQLite, `storage.pg_migrations` for PostgreSQL)."""


def dialect_of(conn: DbConnection) -> Dialect:
    """'postgresql' for a `PgConnection`, else 'sqlite' (a plain `sqlite3.Connection` included)."""
    found = getattr(conn, "dialect", "sqlite")
    return "postgresql" if found == "postgresql" else "sqlite"


def lend_back(conn: DbConnection) -> None:
    """The thread is about to wait (a model call, a tool): on PostgreSQL its server connection
    goes back to the pool until its next statement (`storage.pg.LentConnection`); on SQLite,
    whose connections cost no server, nothing happens."""
    give_back = getattr(conn, "lend_back", None)
    if give_back is not None:
        give_back()
