"""Chat sessions. Every query is scoped by `user_id`: another user's session is 'not found'."""

from __future__ import annotations

import sqlite3
import uuid

from pydantic import BaseModel

from storage.db import utc_now

DEFAULT_NAME = "New chat"


class ChatSession(BaseModel):
    id: str
    name: str
    created_at: str
    updated_at: str


def _session(row: sqlite3.Row) -> ChatSession:
    return ChatSession(id=row["id"], name=row["name"], created_at=row["created_at"], updated_at=row["updated_at"])


def create_session(conn: sqlite3.Connection, user_id: int, name: str | None = None) -> ChatSession:
    now = utc_now()
    session = ChatSession(id=uuid.uuid4().hex, name=name or DEFAULT_NAME, created_at=now, updated_at=now)
    conn.execute(
        "INSERT INTO sessions(id, user_id, name, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
        (session.id, user_id, session.name, now, now),
    )
    return session


def get_session(conn: sqlite3.Connection, user_id: int, session_id: str) -> ChatSession | None:
    row = conn.execute(
        "SELECT * FROM sessions WHERE id = ? AND user_id = ?", (session_id, user_id)
    ).fetchone()
    return _session(row) if row else None


def list_sessions(conn: sqlite3.Connection, user_id: int) -> list[ChatSession]:
    rows = conn.execute(
        "SELECT * FROM sessions WHERE user_id = ? ORDER BY updated_at DESC, rowid DESC", (user_id,)
    )
    return [_session(row) for row in rows]


def rename_session(conn: sqlite3.Connection, user_id: int, session_id: str, name: str) -> ChatSession | None:
    conn.execute(
        "UPDATE sessions SET name = ?, updated_at = ? WHERE id = ? AND user_id = ?",
        (name, utc_now(), session_id, user_id),
    )
    return get_session(conn, user_id, session_id)


def delete_session(conn: sqlite3.Connection, user_id: int, session_id: str) -> bool:
    cursor = conn.execute("DELETE FROM sessions WHERE id = ? AND user_id = ?", (session_id, user_id))
    return cursor.rowcount > 0
