"""Reading a whole chat out (export) and writing one in (import), in bounded pieces.

A chat can hold many thousands of messages, each tool result up to 64 KiB (SPEC 12), so
neither direction holds the whole chat at once. Export first walks the chat's messages from
the newest back with `recent_messages` (the messages the chat shows: its active branch),
keeping only their ids, then reads them again in id order, `READ_BATCH` at a time, for the
caller to stream. Import writes `WRITE_BATCH` rows per transaction, so the database's write
lock is never held long (SPEC 12: at most 100 ms). Validation (which roles, which `meta`
keys) belongs to the caller (`api/export.py`); this module stores what it is given.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from storage.connection import DbConnection
from storage.db import transaction
from storage.messages import COLUMNS, Message, _message, recent_messages

READ_BATCH = 200  # messages read per query, either way
WRITE_BATCH = 100  # messages written per transaction on import


class ChatTooLong(Exception):
    """The chat has more messages than the caller's cap."""


def chat_message_ids(conn: DbConnection, session_id: str, cap: int) -> list[int]:
    """The ids of the messages the chat shows, oldest first; ChatTooLong past `cap`."""
    ids: list[int] = []
    before: int | None = None
    while True:
        page = recent_messages(conn, session_id, READ_BATCH, before_id=before)
        ids.extend(message.id for message in reversed(page))
        if len(ids) > cap:
            raise ChatTooLong(f"the chat has more than {cap} messages")
        if len(page) < READ_BATCH:
            break
        before = page[0].id
    ids.reverse()
    return ids


def messages_in_order(conn: DbConnection, session_id: str, ids: Sequence[int]) -> Iterator[Message]:
    """The messages `ids` of the session, in that order, read `READ_BATCH` at a time."""
    for start in range(0, len(ids), READ_BATCH):
        batch = [int(i) for i in ids[start : start + READ_BATCH]]
        marks = ",".join("?" * len(batch))
        cursor = conn.execute(
            f"SELECT {COLUMNS} FROM chat_messages WHERE session_id = ? AND id IN ({marks}) ORDER BY id",
            (session_id, *batch),
        )
        if isinstance(cursor, sqlite3.Cursor):
            cursor.row_factory = None  # plain tuples, as `_message` reads them
        yield from (_message(row) for row in cursor.fetchall())


def import_rows(
    conn: DbConnection, *, session_id: str, user_id: int, rows: Sequence[tuple[str, str, str, dict[str, Any] | None]]
) -> int:
    """Store `(role, content, created_at, meta)` rows at the end of the session, in order,
    `WRITE_BATCH` per transaction; answers how many were stored."""
    stored = 0
    for start in range(0, len(rows), WRITE_BATCH):
        batch = rows[start : start + WRITE_BATCH]
        with transaction(conn):
            conn.executemany(
                "INSERT INTO chat_messages(session_id, user_id, role, content, meta, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (session_id, user_id, role, content, json.dumps(meta) if meta is not None else None, created_at)
                    for role, content, created_at, meta in batch
                ],
            )
        stored += len(batch)
    return stored
