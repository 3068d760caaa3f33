"""Stored chat messages, always ordered by `id` (never by timestamp)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from storage.connection import DbConnection, DbRow, inserted_id
from storage.db import utc_now


@dataclass(frozen=True, slots=True)
class Message:
    """The `Message` of SPEC section 4: a row of our own table, so a plain frozen value.

    Every turn reads up to `CONTEXT_MESSAGES` of these; building them as pydantic models
    would validate again what the schema already does (figures: bench/README.md).
    """

    id: int
    session_id: str
    role: str
    content: str
    created_at: str
    meta: dict[str, Any] | None = None

    def public(self) -> dict[str, Any]:
        """The JSON shape clients see (`meta` only when present)."""
        data: dict[str, Any] = {
            "id": self.id,
            "session_id": self.session_id,
            "role": self.role,
            "content": self.content,
            "created_at": self.created_at,
        }
        if self.meta is not None:
            data["meta"] = self.meta
        return data


COLUMNS = "id, session_id, role, content, created_at, meta"


def _message(row: DbRow | tuple[object, ...]) -> Message:
    """A row of our own table, columns in `COLUMNS` order."""
    id_, session_id, role, content, created_at, meta = tuple(row)
    return Message(id_, session_id, role, content, created_at, json.loads(meta) if meta else None)


def add_message(
    conn: DbConnection,
    *,
    session_id: str,
    user_id: int,
    role: str,
    content: str,
    meta: dict[str, Any] | None = None,
) -> Message:
    now = utc_now()
    cursor = conn.execute(
        "INSERT INTO chat_messages(session_id, user_id, role, content, meta, created_at) VALUES (?, ?, ?, ?, ?, ?)"
        " RETURNING id",
        (session_id, user_id, role, content, json.dumps(meta) if meta is not None else None, now),
    )
    return Message(id=inserted_id(cursor), session_id=session_id, role=role, content=content, created_at=now, meta=meta)


def recent_messages(conn: DbConnection, session_id: str, limit: int, *, before_id: int | None = None) -> list[Message]:
    """The last `limit` messages of a session (optionally those with id < before_id), oldest first."""
    cursor = conn.execute(
        f"SELECT {COLUMNS} FROM chat_messages WHERE session_id = ? AND id < ? ORDER BY id DESC LIMIT ?",
        (session_id, before_id if before_id is not None else 2**62, limit),
    )
    if isinstance(cursor, sqlite3.Cursor):
        cursor.row_factory = None  # plain tuples: `_message` reads them by position, 40 rows a turn
    rows = cursor.fetchall()
    rows.reverse()
    return [_message(row) for row in rows]


def find_tool_call(conn: DbConnection, user_id: int, tool_call_id: str) -> Message | None:
    """The pending (or answered) interactive call with this id, if it is this user's."""
    cursor = conn.execute(
        f"SELECT {COLUMNS} FROM chat_messages WHERE user_id = ? AND role = 'ui_tools'"
        " AND json_extract(meta, '$.tool_call_id') = ? ORDER BY id LIMIT 1",
        (user_id, tool_call_id),
    )
    row = cursor.fetchone()
    return _message(row) if row else None


def mark_tool_call(conn: DbConnection, message_id: int, status: str) -> bool:
    """Move a pending call to `status`; False if it was no longer pending (a concurrent answer)."""
    cursor = conn.execute(
        "UPDATE chat_messages SET meta = json_set(meta, '$.status', ?) "
        "WHERE id = ? AND json_extract(meta, '$.status') = 'pending'",
        (status, message_id),
    )
    return cursor.rowcount == 1
