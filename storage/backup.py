"""`python app.py backup FILE`: a consistent copy of the database, while the server runs.

SQLite: the online backup API copies the file page by page under a read lock, so the copy is
one moment of the database (copying `app.db` with `cp` while the WAL holds recent writes is
not). PostgreSQL: the server's own tool does it; this command says how instead of half-doing
it (`pg_dump --format=custom "$DATABASE_URL" > app.dump`, restored with `pg_restore`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from config.database_url import DatabaseTarget


class BackupRefused(Exception):
    """This database is not backed up by this command; the message says what to run."""


PG_DUMP_HINT = (
    "the database is PostgreSQL: back it up with the server's tool, e.g. "
    '`pg_dump --format=custom --file=app.dump "$DATABASE_URL"` (restore: `pg_restore --dbname=URL app.dump`)'
)


def backup(target: DatabaseTarget, destination: Path) -> int:
    """Copy the SQLite database to `destination` (a new file); returns its size in bytes."""
    if target.kind == "postgresql":
        raise BackupRefused(PG_DUMP_HINT)
    if destination.exists():
        raise BackupRefused(f"{destination} exists; choose a new file")
    source = sqlite3.connect(target.location)
    try:
        copy = sqlite3.connect(destination)
        try:
            source.backup(copy)
        finally:
            copy.close()
    finally:
        source.close()
    return destination.stat().st_size
