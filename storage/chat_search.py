"""Searching all of one user's chats (`GET /search`): the full-text index's message hits
(`storage.search`, both engines), each with the name of its chat."""

from __future__ import annotations

from pydantic import BaseModel

from storage.connection import DbConnection, Store
from storage.search_terms import best, search_terms


class ChatHit(BaseModel):
    session_id: str
    session_name: str
    message_id: int
    role: str
    snippet: str  # the matched words between `**` markers
    created_at: str


def search_chats(database: Store, conn: DbConnection, user_id: int, text: str, limit: int) -> list[ChatHit]:
    """The best `limit` of the user's own user/assistant messages for `text`; memories are
    not chats, so their hits are left out."""
    terms = search_terms(text)
    if not terms:
        return []
    hits = [hit for hit in database.backend.search(conn, user_id, terms, limit, ()) if hit.source == "message"]
    hits = best(hits, limit)
    ids = sorted({hit.session_id for hit in hits if hit.session_id})
    names: dict[str, str] = {}
    if ids:
        marks = ",".join("?" * len(ids))
        rows = conn.execute(f"SELECT id, name FROM sessions WHERE user_id = ? AND id IN ({marks})", (user_id, *ids))
        names = {row["id"]: row["name"] for row in rows}
    return [
        ChatHit(
            session_id=hit.session_id,
            session_name=names[hit.session_id],
            message_id=hit.id,
            role=hit.role or "",
            snippet=hit.snippet,
            created_at=hit.created_at,
        )
        for hit in hits
        if hit.session_id in names
    ]
