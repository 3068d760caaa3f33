"""Long-lived facts a user (or the model, via /remember) asked to keep."""

from __future__ import annotations

from pydantic import BaseModel

from storage.connection import DbConnection, Store, inserted_id
from storage.db import utc_now
from storage.search_terms import best, search_terms


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
    return _memory(row)


def _memory(row: object) -> Memory:
    return Memory(**{key: row[key] for key in Memory.model_fields})  # type: ignore[index]


def get_memory(conn: DbConnection, user_id: int, memory_id: int) -> Memory | None:
    """The user's memory `memory_id`; None for a missing id or another user's, alike."""
    row = conn.execute("SELECT * FROM user_memories WHERE user_id = ? AND id = ?", (user_id, memory_id)).fetchone()
    return None if row is None else _memory(row)


def list_memories(conn: DbConnection, user_id: int, limit: int, before: int | None = None) -> list[Memory]:
    """The user's memories, newest first (by id), `limit` at most, each older than `before`."""
    rows = conn.execute(
        "SELECT * FROM user_memories WHERE user_id = ? AND id < ? ORDER BY id DESC LIMIT ?",
        (user_id, before if before is not None else 2**62, limit),
    ).fetchall()
    return [_memory(row) for row in rows]


def search_memories(database: Store, conn: DbConnection, user_id: int, text: str, limit: int) -> list[Memory]:
    """The user's memories that best match `text`, best first, through the engine's own
    full-text index (`storage.search`: FTS5 on SQLite, tsvector on PostgreSQL)."""
    terms = search_terms(text)
    if not terms:
        return []
    hits = best(
        [hit for hit in database.backend.search(conn, user_id, terms, limit, ()) if hit.source == "memory"], limit
    )
    if not hits:
        return []
    marks = ",".join("?" for _ in hits)
    rows = conn.execute(
        f"SELECT * FROM user_memories WHERE user_id = ? AND id IN ({marks})", (user_id, *(hit.id for hit in hits))
    ).fetchall()
    found = {row["id"]: _memory(row) for row in rows}
    return [found[hit.id] for hit in hits if hit.id in found]


def update_memory(conn: DbConnection, user_id: int, memory_id: int, content: str) -> Memory | None:
    """Replace the memory's text (the full-text index follows by trigger); None when not the user's."""
    conn.execute(
        "UPDATE user_memories SET content = ?, updated_at = ? WHERE user_id = ? AND id = ?",
        (content, utc_now(), user_id, memory_id),
    )
    return get_memory(conn, user_id, memory_id)


def delete_memory(conn: DbConnection, user_id: int, memory_id: int) -> bool:
    """Delete the user's memory; False when there is no such memory of this user."""
    cursor = conn.execute("DELETE FROM user_memories WHERE user_id = ? AND id = ?", (user_id, memory_id))
    return bool(cursor.rowcount)
