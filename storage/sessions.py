"""Chat sessions. Every query is scoped by `user_id`: another user's session is 'not found'."""

from __future__ import annotations

import time
import uuid

from pydantic import BaseModel

from storage.connection import DbConnection, DbRow
from storage.db import utc_now

DEFAULT_NAME = "New chat"


class ChatSession(BaseModel):
    id: str
    name: str
    created_at: str
    updated_at: str
    pinned_at: str | None = None  # pinned chats come first in the list


def _session(row: DbRow) -> ChatSession:
    return ChatSession(
        id=row["id"],
        name=row["name"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        pinned_at=row["pinned_at"],
    )


def create_session(conn: DbConnection, user_id: int, name: str | None = None) -> ChatSession:
    now = utc_now()
    session = ChatSession(id=uuid.uuid4().hex, name=name or DEFAULT_NAME, created_at=now, updated_at=now)
    conn.execute(
        "INSERT INTO sessions(id, user_id, name, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
        (session.id, user_id, session.name, now, now),
    )
    return session


def get_session(conn: DbConnection, user_id: int, session_id: str) -> ChatSession | None:
    row = conn.execute("SELECT * FROM sessions WHERE id = ? AND user_id = ?", (session_id, user_id)).fetchone()
    return _session(row) if row else None


def list_sessions(conn: DbConnection, user_id: int) -> list[ChatSession]:
    rows = conn.execute(
        "SELECT * FROM sessions WHERE user_id = ?"
        " ORDER BY pinned_at IS NULL, pinned_at DESC, updated_at DESC, rowid DESC",
        (user_id,),
    )
    return [_session(row) for row in rows]


def rename_session(conn: DbConnection, user_id: int, session_id: str, name: str) -> ChatSession | None:
    conn.execute(
        "UPDATE sessions SET name = ?, updated_at = ? WHERE id = ? AND user_id = ?",
        (name, utc_now(), session_id, user_id),
    )
    return get_session(conn, user_id, session_id)


def pin_session(conn: DbConnection, user_id: int, session_id: str, pinned: bool) -> ChatSession | None:
    """Pin (first in the list, newest pin on top) or unpin a session; pinning again keeps the
    first pin's time. Not a change of the chat itself: `updated_at` stays."""
    conn.execute(
        "UPDATE sessions SET pinned_at = CASE WHEN ? THEN COALESCE(pinned_at, ?) ELSE NULL END"
        " WHERE id = ? AND user_id = ?",
        (pinned, utc_now(), session_id, user_id),
    )
    return get_session(conn, user_id, session_id)


DELETE_BATCH = 500  # messages per write transaction when a session is deleted
BATCH_PAUSE_MAX_S = 0.02  # between two batches: as long as the batch took, at most this


def delete_session(conn: DbConnection, user_id: int, session_id: str) -> bool:
    """Delete a session and everything in it.

    Its messages go first, newest first, `DELETE_BATCH` per statement (each its own short
    transaction): deleting a message also updates the full-text index, and a long session
    deleted in one statement held the database's write lock past SPEC 12's bound (at most
    100 ms), every other user's writes waiting. Interrupted half-way, the
    session keeps its older messages and can be deleted again. Between batches the lock is
    left free for as long as the batch held it, so waiting writers get their turn.
    """
    if conn.execute("SELECT 1 FROM sessions WHERE id = ? AND user_id = ?", (session_id, user_id)).fetchone() is None:
        return False
    while True:
        started = time.monotonic()
        deleted = conn.execute(
            "DELETE FROM chat_messages WHERE id IN "
            "(SELECT id FROM chat_messages WHERE session_id = ? ORDER BY id DESC LIMIT ?)",
            (session_id, DELETE_BATCH),
        ).rowcount
        if deleted < DELETE_BATCH:
            break
        # SQLite's lock is not fair: a writer waiting in its busy handler sleeps 1-100 ms
        # between tries, so a loop that takes the lock again at once would starve it.
        time.sleep(min(BATCH_PAUSE_MAX_S, max(0.001, time.monotonic() - started)))
    cursor = conn.execute("DELETE FROM sessions WHERE id = ? AND user_id = ?", (session_id, user_id))
    return cursor.rowcount > 0
