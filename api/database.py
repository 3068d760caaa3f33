"""The request's own SQLite connection, opened lazily and closed on teardown (flaskr's get_db)."""

from __future__ import annotations

import sqlite3

from flask import Flask, current_app, g

from storage.db import Database


def database() -> Database:
    return current_app.extensions["database"]


def get_db() -> sqlite3.Connection:
    if "db" not in g:
        g.db = database().connect()
    return g.db


def close_db(_: BaseException | None = None) -> None:
    conn = g.pop("db", None)
    if conn is not None:
        conn.close()


def init_app(app: Flask) -> None:
    app.teardown_appcontext(close_db)
