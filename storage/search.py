"""Full-text search over one user's messages and memories (FTS5, bm25 ranking).

The user's words are turned into an FTS5 query of quoted terms joined by OR, so no
character a user types can be read as FTS5 syntax; bm25 then ranks rows matching more
(and rarer) terms first. Ties go to the most recent row.

On PostgreSQL the same terms are searched in the rows' tsvector columns instead, ranked
by ts_rank_cd (`storage.search_pg`); the hits have the same shape and the same order rule.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from storage.connection import DbConnection, dialect_of

MAX_TERMS = 16
SNIPPET_TOKENS = 16
HIGHLIGHT_OPEN, HIGHLIGHT_CLOSE = "**", "**"
SEARCHED_ROLES = ("user", "assistant")


class SearchHit(BaseModel):
    source: Literal["message", "memory"]
    id: int
    session_id: str | None
    role: str | None
    created_at: str
    snippet: str
    score: float


def search_terms(text: str) -> list[str]:
    """`Mars rover? mars` -> `["mars", "rover"]`: distinct lowercased words, at most MAX_TERMS."""
    terms: list[str] = []
    for term in re.findall(r"\w+", text.lower()):
        if term not in terms:
            terms.append(term)
    return terms[:MAX_TERMS]


def fts_query(text: str) -> str | None:
    """`mars rover?` -> `"mars" OR "rover"`; None when the text holds no searchable word."""
    terms = search_terms(text)
    if not terms:
        return None
    return " OR ".join(f'"{term}"' for term in terms)


def search_user_history(
    conn: DbConnection,
    user_id: int,
    text: str,
    *,
    limit: int = 8,
    exclude_message_ids: Sequence[int] = (),
) -> list[SearchHit]:
    """Best `limit` hits among the user's own user/assistant messages and memories."""
    if dialect_of(conn) == "postgresql":
        from storage.search_pg import pg_hits

        hits = pg_hits(conn, user_id, search_terms(text), limit, exclude_message_ids)
        return best(hits, limit)
    query = fts_query(text)
    if query is None:
        return []
    hits = _message_hits(conn, user_id, query, limit, exclude_message_ids) + _memory_hits(conn, user_id, query, limit)
    return best(hits, limit)


def best(hits: list[SearchHit], limit: int) -> list[SearchHit]:
    """The first `limit` by score (lower is better), ties to the newest."""
    # Two stable sorts: newest first (then higher id), then best score; equal scores keep
    # that recency order.
    hits.sort(key=lambda hit: (hit.created_at, hit.id), reverse=True)
    hits.sort(key=lambda hit: hit.score)
    return hits[:limit]


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
    return [
        SearchHit(
            source="message",
            id=r["id"],
            session_id=r["session_id"],
            role=r["role"],
            created_at=r["created_at"],
            snippet=r["snippet"],
            score=r["score"],
        )
        for r in rows
    ]


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
    return [
        SearchHit(
            source="memory",
            id=r["id"],
            session_id=None,
            role=None,
            created_at=r["created_at"],
            snippet=r["snippet"],
            score=r["score"],
        )
        for r in rows
    ]
