"""The request's SQLite connection (flaskr's get_db): this thread's own, reused across requests.

On teardown an unfinished transaction is rolled back; the connection itself stays with
the thread (see `Database.thread_connection`).
"""

from __future__ import annotations

import sqlite3

from flask import Flask, g

from api.services import services
from storage.db import Database


def database() -> Database:
    return services().database


def get_db() -> sqlite3.Connection:
    if "db" not in g:
        g.db = database().thread_connection()
    connection: sqlite3.Connection = g.db
    return connection


def close_db(_: BaseException | None = None) -> None:
    conn = g.pop("db", None)
    if conn is not None and conn.in_transaction:
        conn.execute("ROLLBACK")


def init_app(app: Flask) -> None:
    app.teardown_appcontext(close_db)
