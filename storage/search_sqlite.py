"""`search_user_history` on SQLite: FTS5 indexes, bm25 ranking.

The terms are quoted FTS5 phrases joined by OR (`fts_query`), so no character a user types is
read as FTS5 syntax; bm25 then ranks rows matching more (and rarer) terms first.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.connection import DbConnection
from storage.search_terms import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN, SEARCHED_ROLES, SNIPPET_TOKENS, SearchHit


def sqlite_hits(
    conn: DbConnection, user_id: int, terms: Sequence[str], limit: int, exclude_message_ids: Sequence[int]
) -> list[SearchHit]:
    """Up to `limit` message hits and `limit` memory hits (the caller keeps the best)."""
    if not terms:
        return []
    query = " OR ".join(f'"{term}"' for term in terms)
    return _message_hits(conn, user_id, query, limit, exclude_message_ids) + _memory_hits(conn, user_id, query, limit)


def _message_hits(
    conn: DbConnection, user_id: int, query: str, limit: int, exclude_message_ids: Sequence[int]
) -> list[SearchHit]:
    excluded = ",".join(str(int(i)) for i in exclude_message_ids) or "-1"
    roles = ",".join(f"'{role}'" for role in SEARCHED_ROLES)
    rows = conn.execute(
        f"""
        SELECT m.id, m.session_id, m.role, m.created_at,
               snippet(chat_messages_fts, 0, ?, ?, '…', {SNIPPET_TOKENS}) AS snippet,
               bm25(chat_messages_fts) AS score
        FROM chat_messages_fts JOIN chat_messages m ON m.id = chat_messages_fts.rowid
        WHERE chat_messages_fts MATCH ? AND m.user_id = ? AND m.role IN ({roles}) AND m.id NOT IN ({excluded})
        ORDER BY score, m.id DESC LIMIT ?
        """,
        (HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE, query, user_id, limit),
    ).fetchall()
    return [SearchHit.of_message(r) for r in rows]


def _memory_hits(conn: DbConnection, user_id: int, query: str, limit: int) -> list[SearchHit]:
    rows = conn.execute(
        f"""
        SELECT m.id, m.created_at,
               snippet(user_memories_fts, 0, ?, ?, '…', {SNIPPET_TOKENS}) AS snippet,
               bm25(user_memories_fts) AS score
        FROM user_memories_fts JOIN user_memories m ON m.id = user_memories_fts.rowid
        WHERE user_memories_fts MATCH ? AND m.user_id = ?
        ORDER BY score, m.id DESC LIMIT ?
        """,
        (HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE, query, user_id, limit),
    ).fetchall()
    return [SearchHit.of_memory(r) for r in rows]
