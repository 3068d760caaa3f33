"""A PostgreSQL connection that reads like `sqlite3.Connection` to the storage modules.

`PgConnection` wraps a psycopg connection: autocommit with explicit BEGIN/COMMIT, `?`
placeholders (`storage.pg_sql`), rows by name and index (`PgRow`, like `sqlite3.Row`), errors
as the storage layer's own classes (`storage.pg_errors`). `connect_pg` opens one outside any
pool (the health probe, the confinement command); `storage.pg.PgDatabase` pools them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import RowMaker

from storage.connection import BUSY_TIMEOUT_MS
from storage.errors import StorageError
from storage.pg_errors import translated
from storage.pg_sql import WRITE_LOCK, pg_sql, takes_write_lock

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
            raise StorageError("Cannot operate on a closed database.", "closed")

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


def configure(raw: psycopg.Connection[Any]) -> None:
    raw.autocommit = True
    raw.row_factory = pg_row
    # Values are merged into the statement by psycopg (quoted by libpq's rules), not bound
    # server-side: SQLite's loosely typed `? IS NULL OR name = ?` has no type for a bare NULL
    # parameter in PostgreSQL's extended protocol, and the storage SQL is one copy for both.
    raw.cursor_factory = psycopg.ClientCursor
    # as SQLite's busy timeout: a lock (a row, the write lock) not had in time is StorageLocked, a 503
    raw.execute(f"SET lock_timeout = {BUSY_TIMEOUT_MS}")


def connect_pg(url: str) -> PgConnection:
    """A new configured connection outside any pool, the caller's to close."""
    try:
        raw: psycopg.Connection[Any] = psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as error:
        raise translated(error) from error
    configure(raw)
    return PgConnection(raw)
