"""A temporary store with two users, the base of the tool tests' worlds."""

from __future__ import annotations

from pathlib import Path

from config.settings import Settings
from storage.connection import DbConnection, Store
from storage.db import Database
from storage.users import create_user


class TwoUserStore:
    """A migrated database in `tmp_path`, users Alice and Bob, and settings pointing at both
    the database and `tmp_path/data` (the data dir of uploads and workspaces)."""

    def __init__(self, tmp_path: Path, db_name: str = "t.db", store: Store | None = None) -> None:
        """`store`: an already migrated database to use instead (e.g. the `store` fixture's
        PostgreSQL one); the settings' DATABASE_PATH then names no file in use."""
        if store is None:
            store = Database(tmp_path / db_name)
            store.migrate()
        self.database: Store = store
        self.conn: DbConnection = self.database.connect()
        self.data_dir = tmp_path / "data"
        self.settings = Settings(database_path=str(tmp_path / db_name), data_dir=str(self.data_dir))
        self.alice = create_user(self.conn, "alice")[0].id
        self.bob = create_user(self.conn, "bob")[0].id
