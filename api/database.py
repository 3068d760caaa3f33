"""The request's database connection (flaskr's get_db): this thread's own, reused across requests.

On teardown an unfinished transaction is rolled back; the connection itself stays with
the thread (see `Database.thread_connection`).
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


def init_app(app: Flask) -> None:
    app.teardown_appcontext(close_db)
