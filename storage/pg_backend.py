"""What PostgreSQL does its own way, behind `storage.connection.Backend` (`PgDatabase.backend`).

- `migrate`: each step's PostgreSQL DDL (`storage.migrations`), one transaction per step under
  a transaction-scoped advisory lock taken before `_migrations` is read, so servers and CLI
  commands starting at once on a new database apply each step exactly once.
- `search`: tsvector columns ranked by ts_rank_cd (`storage.search_pg`).
- `run_memory_sql`: the statement runs as the restricted role (`storage.pg_memory_run`), on
  one of a few places shared fairly among users (`foundation.fair_share.FairGate`).
- `limit_lock_wait`: `lock_timeout` and `statement_timeout`, so a server that is up but stuck
  answers "locked" to the health probe instead of hanging it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from bounded.pool import WorkerPool
from bounded.sql_values import MemoryAnswer, SqlError
from foundation.cancellation import CancelToken
from foundation.fair_share import FairGate
from storage.connection import DbConnection, Migration
from storage.migrations import apply_pending
from storage.pg_connection import PgConnection
from storage.pg_memory_run import CONNECTIONS as MEMORY_SQL_CONNECTIONS
from storage.pg_memory_run import PgStore, run_pg_memory
from storage.search_pg import pg_hits
from storage.search_terms import SearchHit

MIGRATION_LOCK = 7_461_626_001  # pg_advisory_xact_lock key: "migrations of this app"


class PgBackend:
    """The PostgreSQL side of every feature that differs between the engines."""

    name: Literal["postgresql"] = "postgresql"

    def __init__(self, store: PgStore) -> None:
        self.store = store
        # /memory_sql's statements at once in this process, shared fairly among users (SPEC 12)
        self.memory_gate = FairGate(MEMORY_SQL_CONNECTIONS)

    def migrate(self, conn: DbConnection, migrations: Sequence[Migration]) -> list[str]:
        """Apply the pending steps in order, each in its own transaction; return their names.

        The advisory lock is taken inside each step's transaction before `_migrations` is read,
        so a process that waited finds the other's work done instead of applying it again.
        """
        if not isinstance(conn, PgConnection):
            raise TypeError(f"PostgreSQL migrations need a PgConnection, got {type(conn).__name__}")
        conn.execute("BEGIN")
        try:  # two first starts at once: one creates the table, the other waits and finds it
            conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        finally:
            conn.execute("COMMIT")
        pg = conn

        def begin() -> None:
            pg.execute("BEGIN")
            pg.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))

        def run(step: Any) -> None:
            pg.script(step) if isinstance(step, str) else step(pg)

        return apply_pending(
            conn,
            [(migration.name, migration.postgresql) for migration in migrations if migration.postgresql is not None],
            begin=begin,
            run=run,
            recorded=lambda: recorded_migrations(pg),
            record_sql="INSERT INTO _migrations(name, applied_at)"
            " VALUES (?, to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'))",
        )

    def search(
        self, conn: DbConnection, user_id: int, terms: Sequence[str], limit: int, exclude_message_ids: Sequence[int]
    ) -> list[SearchHit]:
        return pg_hits(conn, user_id, terms, limit, exclude_message_ids)

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
        """As the restricted role, on a login of its own, holding a fair share of
        `memory_gate`'s places (`pool` is SQLite's workers: unused)."""
        return run_pg_memory(
            self.store,
            user_id,
            sql,
            deadline_s=deadline_s,
            max_rows=max_rows,
            max_update_rows=max_update_rows,
            cancel=cancel,
            gate=self.memory_gate,
            dry_run=dry_run,
        )

    def limit_lock_wait(self, conn: DbConnection, ms: int) -> None:
        conn.execute(f"SET lock_timeout = {int(ms)}")
        conn.execute(f"SET statement_timeout = {int(ms)}")


def recorded_migrations(conn: DbConnection) -> set[str]:
    """Names in `_migrations` (the table exists: `migrate` creates it first)."""
    return {row[0] for row in conn.execute("SELECT name FROM _migrations")}
