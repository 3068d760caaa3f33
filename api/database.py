"""The request's database connection (flaskr's get_db): this thread's own, reused across requests.

On teardown an unfinished transaction is rolled back and the connection is released: a
SQLite one stays with the thread (see `Database.thread_connection`), a PostgreSQL one goes
back to the pool (`PgDatabase.release_thread_connection`).
"""

from __future__ import annotations

from flask import Flask, g

from api.services import services
from storage.connection import DbConnection, Store


def database() -> Store:
    return services().database


def get_db() -> DbConnection:
    if "db" not in g:
        g.db = database().thread_connection()
    connection: DbConnection = g.db
    return connection


def close_db(_: BaseException | None = None) -> None:
    conn = g.pop("db", None)
    if conn is not None and conn.in_transaction:
        conn.execute("ROLLBACK")
    if conn is not None:
        database().release_thread_connection()  # PostgreSQL: back to the pool; SQLite: kept


def release_db() -> None:
    """Give the request's connection back before the request waits on a turn (a JSON answer
    without the ASGI hand-off waits in this thread): the turn's worker needs one of its own,
    and a PostgreSQL pool must not be held by waiting requests. A later `get_db()` takes one again."""
    close_db()


def init_app(app: Flask) -> None:
    app.teardown_appcontext(close_db)
