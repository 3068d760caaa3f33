"""Long-lived facts a user (or the model, via /remember) asked to keep."""

from __future__ import annotations

from pydantic import BaseModel

from storage.connection import DbConnection, inserted_id
from storage.db import utc_now


class Memory(BaseModel):
    id: int
    content: str
    importance: int
    created_at: str
    updated_at: str


def add_memory(conn: DbConnection, user_id: int, content: str, importance: int = 1) -> Memory:
    now = utc_now()
    cursor = conn.execute(
        "INSERT INTO user_memories(user_id, content, importance, created_at, updated_at) VALUES (?, ?, ?, ?, ?)"
        " RETURNING id",
        (user_id, content, importance, now, now),
    )
    return Memory(id=inserted_id(cursor), content=content, importance=importance, created_at=now, updated_at=now)


def find_memory(conn: DbConnection, user_id: int, content: str) -> Memory | None:
    """An identical memory already stored (so /remember twice does not duplicate)."""
    row = conn.execute(
        "SELECT * FROM user_memories WHERE user_id = ? AND content = ? ORDER BY id LIMIT 1", (user_id, content)
    ).fetchone()
    if row is None:
        return None
    return Memory(**{key: row[key] for key in Memory.model_fields})
