"""Full-text search over one user's messages and memories, on the store's engine.

The engine's own index does the work (`Store.backend.search`: FTS5 with bm25 on SQLite,
tsvector columns with ts_rank_cd on PostgreSQL); the hits have the same shape and the same
order rule on both (`storage.search_terms`).
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.connection import DbConnection, Store
from storage.search_terms import SearchHit, best, fts_query, search_terms

__all__ = ["SearchHit", "best", "fts_query", "search_terms", "search_user_history"]


def search_user_history(
    database: Store,
    conn: DbConnection,
    user_id: int,
    text: str,
    *,
    limit: int = 8,
    exclude_message_ids: Sequence[int] = (),
) -> list[SearchHit]:
    """Best `limit` hits among the user's own user/assistant messages and memories."""
    terms = search_terms(text)
    if not terms:
        return []
    return best(database.backend.search(conn, user_id, terms, limit, exclude_message_ids), limit)
