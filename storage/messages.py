"""Stored chat messages, always ordered by `id` (never by timestamp), as a tree (SPEC 17).

Each message has a parent (`parent_id`, NULL for a first message); the branch on screen runs
from a session's `active_leaf_id` up to its root, and every read of "the chat" (the turn's
context, the messages API, /v1) reads that branch (`recent_messages`). Ids grow along a branch,
so a branch in id order is a branch in the order it was written (migration `m103_message_tree`).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from storage.connection import DbConnection, DbRow
from storage.db import utc_now
from storage.roles import UI_TOOLS


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
    parent_id: int | None = None

    def public(self) -> dict[str, Any]:
        """The JSON shape clients see (`meta` only when present)."""
        data: dict[str, Any] = {
            "id": self.id,
            "session_id": self.session_id,
            "role": self.role,
            "content": self.content,
            "created_at": self.created_at,
            "parent_id": self.parent_id,
        }
        if self.meta is not None:
            data["meta"] = self.meta
        return data


COLUMNS = "id, session_id, role, content, created_at, meta, parent_id"


def _message(row: DbRow | tuple[object, ...]) -> Message:
    """A row of our own table, columns in `COLUMNS` order."""
    id_, session_id, role, content, created_at, meta, parent_id = tuple(row)
    return Message(id_, session_id, role, content, created_at, json.loads(meta) if meta else None, parent_id)


def add_message(
    conn: DbConnection,
    *,
    session_id: str,
    user_id: int,
    role: str,
    content: str,
    meta: dict[str, Any] | None = None,
) -> Message:
    """Store a message at the tip of the session's branch on screen; it becomes the tip (the
    database moves `active_leaf_id` in the same statement, `m103_message_tree`)."""
    now = utc_now()
    row = conn.execute(
        "INSERT INTO chat_messages(session_id, user_id, role, content, meta, created_at, parent_id)"
        " VALUES (?, ?, ?, ?, ?, ?, (SELECT active_leaf_id FROM sessions WHERE id = ?)) RETURNING id, parent_id",
        (session_id, user_id, role, content, json.dumps(meta) if meta is not None else None, now, session_id),
    ).fetchone()
    return Message(row[0], session_id, role, content, now, meta, row[1])


# The branch ending at a start row, walked up by primary key, at most `limit` rows: the cost
# of a turn's context read does not grow with the session or its number of branches.
_BRANCH = f"""
    WITH RECURSIVE branch(id, parent_id, depth) AS (
        SELECT id, parent_id, 1 FROM chat_messages WHERE id = ({{start}}) AND session_id = ?
        UNION ALL
        SELECT m.id, m.parent_id, b.depth + 1 FROM chat_messages m JOIN branch b ON m.id = b.parent_id
        WHERE b.depth < ?
    )
    SELECT {", ".join("c." + name for name in COLUMNS.split(", "))}
    FROM branch b JOIN chat_messages c ON c.id = b.id ORDER BY c.id
"""
_FROM_LEAF = _BRANCH.format(start="SELECT active_leaf_id FROM sessions WHERE id = ?")
_FROM_BEFORE = _BRANCH.format(start="SELECT parent_id FROM chat_messages WHERE id = ? AND session_id = ?")


# A page above an id that is not a message of the session (a client's own bound): the branch
# walked from its leaf, counting only the rows below that id.
_BELOW_ID = f"""
    WITH RECURSIVE branch(id, parent_id, depth) AS (
        SELECT id, parent_id, CASE WHEN id < ? THEN 1 ELSE 0 END FROM chat_messages
        WHERE id = (SELECT active_leaf_id FROM sessions WHERE id = ?) AND session_id = ?
        UNION ALL
        SELECT m.id, m.parent_id, b.depth + CASE WHEN m.id < ? THEN 1 ELSE 0 END
        FROM chat_messages m JOIN branch b ON m.id = b.parent_id
        WHERE b.depth < ?
    )
    SELECT {", ".join("c." + name for name in COLUMNS.split(", "))}
    FROM branch b JOIN chat_messages c ON c.id = b.id WHERE c.id < ? ORDER BY c.id
"""


def recent_messages(conn: DbConnection, session_id: str, limit: int, *, before_id: int | None = None) -> list[Message]:
    """The last `limit` messages of the session's active branch, oldest first.

    `before_id`: the `limit` messages above it, the next page up. A message of this session
    pages up its own branch (the one on screen when the client read it); any other id pages
    up the active branch from below that id."""
    if limit <= 0:
        return []
    if before_id is None:
        cursor = conn.execute(_FROM_LEAF, (session_id, session_id, limit))
    elif conn.execute(
        "SELECT 1 FROM chat_messages WHERE id = ? AND session_id = ?", (before_id, session_id)
    ).fetchone():
        cursor = conn.execute(_FROM_BEFORE, (before_id, session_id, session_id, limit))
    else:
        cursor = conn.execute(_BELOW_ID, (before_id, session_id, session_id, before_id, limit, before_id))
    if isinstance(cursor, sqlite3.Cursor):
        cursor.row_factory = None  # plain tuples: `_message` reads them by position, 40 rows a turn
    return [_message(row) for row in cursor.fetchall()]


def session_message(conn: DbConnection, session_id: str, message_id: int) -> Message | None:
    """One message of this session (None for a missing id or another session's)."""
    cursor = conn.execute(
        f"SELECT {COLUMNS} FROM chat_messages WHERE id = ? AND session_id = ?", (message_id, session_id)
    )
    row = cursor.fetchone()
    return _message(row) if row else None


def active_leaf(conn: DbConnection, session_id: str) -> int | None:
    row = conn.execute("SELECT active_leaf_id FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return row[0] if row else None


def set_active_leaf(conn: DbConnection, session_id: str, leaf_id: int | None) -> None:
    """Make the branch ending at `leaf_id` the one on screen (None: an empty branch, before a
    new first message); the next stored message is attached under it (a fork)."""
    conn.execute("UPDATE sessions SET active_leaf_id = ? WHERE id = ?", (leaf_id, session_id))


def newest_leaf_below(conn: DbConnection, session_id: str, message_id: int) -> int:
    """The newest message in the subtree of `message_id`: a leaf (a child always has a larger
    id), the tip of the most recently written version that contains the message."""
    row = conn.execute(
        """
        WITH RECURSIVE below(id) AS (
            SELECT id FROM chat_messages WHERE id = ? AND session_id = ?
            UNION ALL
            SELECT m.id FROM chat_messages m JOIN below b ON m.parent_id = b.id
        )
        SELECT MAX(id) FROM below
        """,
        (message_id, session_id),
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else message_id


def siblings(conn: DbConnection, session_id: str, messages: list[Message]) -> dict[int, list[int]]:
    """For each message that has other versions: the ids of it and its siblings (same parent), by id."""
    if not messages:
        return {}
    parents = sorted({m.parent_id for m in messages if m.parent_id is not None})
    clauses = ["parent_id IS NULL"] if any(m.parent_id is None for m in messages) else []
    if parents:
        clauses.append(f"parent_id IN ({', '.join('?' for _ in parents)})")
    rows = conn.execute(
        f"SELECT id, parent_id FROM chat_messages WHERE session_id = ? AND ({' OR '.join(clauses)}) ORDER BY id",
        (session_id, *parents),
    ).fetchall()
    by_parent: dict[int | None, list[int]] = {}
    for row in rows:
        by_parent.setdefault(row[1], []).append(row[0])
    return {m.id: by_parent[m.parent_id] for m in messages if len(by_parent.get(m.parent_id, ())) > 1}


def on_active_branch(conn: DbConnection, session_id: str, message_id: int) -> bool:
    """Whether the message is on the branch on screen (walked up from the leaf only as far as
    its id: ids grow along a branch)."""
    row = conn.execute(
        """
        WITH RECURSIVE up(id, parent_id) AS (
            SELECT id, parent_id FROM chat_messages WHERE id = (SELECT active_leaf_id FROM sessions WHERE id = ?)
            UNION ALL
            SELECT m.id, m.parent_id FROM chat_messages m JOIN up u ON m.id = u.parent_id WHERE m.id >= ?
        )
        SELECT 1 FROM up WHERE id = ?
        """,
        (session_id, message_id, message_id),
    ).fetchone()
    return row is not None


def session_tree(conn: DbConnection, session_id: str) -> list[Message]:
    """Every message of the session, every branch, in id order."""
    cursor = conn.execute(f"SELECT {COLUMNS} FROM chat_messages WHERE session_id = ? ORDER BY id", (session_id,))
    return [_message(row) for row in cursor.fetchall()]


def set_turn_error(conn: DbConnection, message_id: int, error: dict[str, Any] | None) -> None:
    """Mark a user message whose turn failed (`meta.turn_error`, so a reload still shows the
    error and Retry; never a fake assistant message, SPEC 6.4), or clear the mark (None)."""
    row = conn.execute("SELECT meta FROM chat_messages WHERE id = ?", (message_id,)).fetchone()
    if row is None:
        return
    meta = json.loads(row[0]) if row[0] else {}
    if error is None and "turn_error" not in meta:
        return
    if error is None:
        meta.pop("turn_error")
    else:
        meta["turn_error"] = error
    conn.execute("UPDATE chat_messages SET meta = ? WHERE id = ?", (json.dumps(meta) if meta else None, message_id))


def find_tool_call(conn: DbConnection, user_id: int, tool_call_id: str) -> Message | None:
    """The pending (or answered) interactive call with this id, if it is this user's."""
    cursor = conn.execute(
        f"SELECT {COLUMNS} FROM chat_messages WHERE user_id = ? AND role = ?"
        " AND json_extract(meta, '$.tool_call_id') = ? ORDER BY id LIMIT 1",
        (user_id, UI_TOOLS, tool_call_id),
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
