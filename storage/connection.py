"""The one connection interface the storage layer is written against, for both backends.

`storage.db.Connection` (a `sqlite3.Connection`, the embedded default) satisfies `DbConnection`;
a PostgreSQL connection is wrapped by `storage.pg_connection.PgConnection` so that it does too:
`?` placeholders, rows readable by name and by index, `in_transaction`, and errors raised as
the storage layer's own classes (`storage.errors`), so one `except StorageError`,
`storage_fault()` and the 503 handler serve both. So each storage module is one copy of SQL
that both engines accept (`INSERT … RETURNING id`, `ON CONFLICT`).

What truly differs (the full-text search, the `/memory_sql` engine, the health probe's lock
wait, how migrations are applied) is the store's `Backend`, chosen once with the store:
`Store` is what the app holds, a factory of connections with its backend
(`storage.db.Database` + `storage.sqlite_backend.SqliteBackend` for a SQLite file,
`storage.pg.PgDatabase` + `storage.pg_backend.PgBackend` for a server), picked from
`DATABASE_URL` by `storage.open.open_store`. Nothing below asks which engine it runs on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from bounded.pool import WorkerPool
from bounded.sql_values import MemoryAnswer, SqlError
from foundation.cancellation import CancelToken
from storage.search_terms import SearchHit

Dialect = Literal["sqlite", "postgresql"]
BUSY_TIMEOUT_MS = 5000  # a lock not had in 5 s is a StorageLocked (503), on both engines


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
    def backend(self) -> Backend:
        """What differs between the engines, chosen when the store was opened."""
        ...

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

    def migrate(self, migrations: Sequence[Migration] | None = None) -> list[str]:
        """Bring the schema up to date (`storage.migrations.MIGRATIONS` unless told otherwise);
        returns the names of the steps applied now."""
        ...

    def close(self) -> None:
        """Release what the store holds open across requests (PostgreSQL: its pool)."""
        ...


def inserted_id(cursor: DbCursor) -> int:
    """The id of an `INSERT … RETURNING id` (both engines; no `lastrowid` on PostgreSQL). Reads
    the cursor to its end, so SQLite finishes the statement (and frees its lock) right away."""
    rows = cursor.fetchall()
    return int(rows[0][0])


class ScriptConnection(DbConnection, Protocol):
    """A PostgreSQL connection that runs DDL as written (`$$` bodies, `%` in it: no placeholders)."""

    def script(self, sql: str) -> None: ...


@dataclass(frozen=True)
class Migration:
    """One append-only, named schema step, in each engine's DDL side by side.

    `name` is what `_migrations` records on both engines (never rename a shipped step). Each
    side is a script, a function of the connection (a step that must look before it acts), or
    None: the engine has nothing to do at this step (then nothing is recorded for it there).
    """

    name: str
    sqlite: str | Callable[[DbConnection], None] | None
    postgresql: str | Callable[[ScriptConnection], None] | None
    doc: str = ""


class Backend(Protocol):
    """What differs between SQLite and PostgreSQL, chosen once with the store (`Store.backend`)."""

    @property
    def name(self) -> Dialect: ...

    def migrate(self, conn: DbConnection, migrations: Sequence[Migration]) -> list[str]:
        """Apply the steps not yet recorded in `_migrations`, each in its own transaction."""
        ...

    def search(
        self, conn: DbConnection, user_id: int, terms: Sequence[str], limit: int, exclude_message_ids: Sequence[int]
    ) -> list[SearchHit]:
        """Up to `limit` message hits and `limit` memory hits (`storage.search` keeps the best)."""
        ...

    def run_memory_sql(
        self,
        user_id: int,
        sql: str,
        *,
        deadline_s: float,
        max_rows: int,
        max_update_rows: int,
        pool: WorkerPool | None,
        cancel: CancelToken,
        dry_run: bool = False,
    ) -> MemoryAnswer | SqlError:
        """Run one `/memory_sql` statement under the engine's own confinement (SPEC 6a); an
        UPDATE comes back as its changes, not yet written. `dry_run`: the engine classifies
        it (`select` or `update`, or its refusal); a SELECT does not run, an UPDATE runs as always
        as far as recording its changes (nothing is written either way)."""
        ...

    def limit_lock_wait(self, conn: DbConnection, ms: int) -> None:
        """Make `conn` give up on a lock after `ms` (the health probe's short wait)."""
        ...


def lend_back(conn: DbConnection) -> None:
    """The thread is about to wait (a model call, a tool): on PostgreSQL its server connection
    goes back to the pool until its next statement (`storage.pg.LentConnection`); on SQLite,
    whose connections cost no server, nothing happens."""
    give_back = getattr(conn, "lend_back", None)
    if give_back is not None:
        give_back()
