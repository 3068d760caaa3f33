"""The app's database, chosen by `DATABASE_URL` (`Settings.open_store` in config/settings.py)."""

from __future__ import annotations

from storage.connection import Store
from storage.database_url import DatabaseTarget
from storage.db import Database


def open_store(target: DatabaseTarget, *, pool_size: int = 10) -> Store:
    """A SQLite `Database` for a file, a pooled `PgDatabase` for a PostgreSQL URL (psycopg is
    imported only then). The one place the engine is chosen: each store carries its `backend`
    (`storage.connection.Backend`), and nothing below asks which engine it runs on."""
    if target.kind == "postgresql":
        from storage.pg import PgDatabase

        return PgDatabase(target.location, pool_size=pool_size)
    return Database(target.location)
