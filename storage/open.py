"""The app's database, chosen by `DATABASE_URL` (or `DATABASE_PATH`) and `DATABASE_POOL_SIZE`."""

from __future__ import annotations

from config.database_url import DatabaseTarget
from config.settings import Settings
from storage.connection import Store
from storage.db import Database


def open_configured_store(settings: Settings) -> Store:
    """The store the settings name."""
    return open_store(settings.database_target(), pool_size=settings.database_pool_size)


def open_store(target: DatabaseTarget, *, pool_size: int = 10) -> Store:
    """A SQLite `Database` for a file, a pooled `PgDatabase` for a PostgreSQL URL (psycopg is
    imported only then). The one place the engine is chosen: each store carries its `backend`
    (`storage.connection.Backend`), and nothing below asks which engine it runs on."""
    if target.kind == "postgresql":
        from storage.pg import PgDatabase

        return PgDatabase(target.location, pool_size=pool_size)
    return Database(target.location)
