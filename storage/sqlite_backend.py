"""What SQLite does its own way, behind `storage.connection.Backend` (`Database.backend`).

- `migrate`: each step's SQLite DDL (`storage.migrations`), one `BEGIN IMMEDIATE` transaction
  per step.
- `search`: FTS5 with bm25 (`storage.search_sqlite`).
- `run_memory_sql`: a SQL worker of the app's pool runs the statement on a read-only
  connection under SQLite's authorizer (`bounded/sql.py`, `bounded/sql_memory.py`).
- `limit_lock_wait`: the connection's busy timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from bounded.pool import WorkerPool, pool_or_own
from bounded.sql import run_memory
from bounded.sql_values import MemoryAnswer, MemoryJob, SqlError
from foundation.cancellation import CancelToken
from storage.connection import DbConnection, Migration
from storage.migrations import apply_pending, execute_script
from storage.search_sqlite import sqlite_hits
from storage.search_terms import SearchHit


class SqliteBackend:
    """The SQLite side of every feature that differs between the engines, for the file `path`."""

    name: Literal["sqlite"] = "sqlite"

    def __init__(self, path: str) -> None:
        self.path = path

    def migrate(self, conn: DbConnection, migrations: Sequence[Migration]) -> list[str]:
        """Apply pending steps in order, each in its own transaction; return their names.

        Several processes may start at once on a fresh file (two servers, a server and a CLI
        command). Each step's transaction takes the write lock first (`BEGIN IMMEDIATE`, which
        waits on the busy timeout) and only then reads whether the step is recorded, so a
        process that waited finds the other's work done instead of applying it again ("table
        already exists"). The first read, outside any lock, only spares every later start the
        write lock when the schema is already current.
        """

        def begin() -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")

        def run(step: Any) -> None:
            execute_script(conn, step) if isinstance(step, str) else step(conn)

        return apply_pending(
            conn,
            [(migration.name, migration.sqlite) for migration in migrations if migration.sqlite is not None],
            begin=begin,
            run=run,
            recorded=lambda: recorded_migrations(conn),
            record_sql="INSERT INTO _migrations(name, applied_at) VALUES (?, strftime('%Y-%m-%dT%H:%M:%fZ','now'))",
        )

    def search(
        self, conn: DbConnection, user_id: int, terms: Sequence[str], limit: int, exclude_message_ids: Sequence[int]
    ) -> list[SearchHit]:
        return sqlite_hits(conn, user_id, terms, limit, exclude_message_ids)

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
        """In a SQL worker of `pool` (a one-off worker without one, for the CLI and tests)."""
        job = MemoryJob(
            database_path=self.path,
            user_id=user_id,
            sql=sql,
            deadline_s=deadline_s,
            max_rows=max_rows,
            max_update_rows=max_update_rows,
            dry_run=dry_run,
        )
        with pool_or_own(pool) as used:
            return run_memory(used, job, cancel, user=user_id)

    def limit_lock_wait(self, conn: DbConnection, ms: int) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(ms)}")


def recorded_migrations(conn: DbConnection) -> set[str]:
    """Names in `_migrations` (none while the table does not exist yet)."""
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_migrations'").fetchone()
    return {row[0] for row in conn.execute("SELECT name FROM _migrations")} if exists else set()
