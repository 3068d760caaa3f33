"""`search_user_history` on PostgreSQL: tsvector columns, GIN indexes, ts_rank_cd ranking.

Each of the user's words becomes its own `plainto_tsquery('app_search', ?)` with the word as a
bound parameter, and the terms are joined with `||` (OR) in SQL: plainto_tsquery reads no
operators, so nothing a user types is taken as tsquery syntax (`!`, `&`, `:*`, quotes are
plain text or dropped). The `app_search` configuration drops accents, lowercases and does not
stem, as FTS5's unicode61 tokenizer with remove_diacritics does; the `search_vector` columns
use the same configuration (`storage.migrations.M002_FULL_TEXT_SEARCH`).

`score` is minus ts_rank_cd, so that lower is better on both backends (FTS5's bm25 is
negative) and `storage.search_terms.best` orders the hits alike. Snippets come from ts_headline
with the same `**` markers around matched words.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.connection import DbConnection
from storage.search_terms import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN, SEARCHED_ROLES, SNIPPET_TOKENS, SearchHit

HEADLINE_OPTIONS = (
    f'StartSel="{HIGHLIGHT_OPEN}", StopSel="{HIGHLIGHT_CLOSE}", MaxWords={SNIPPET_TOKENS}, MinWords=4, '
    'ShortWord=0, MaxFragments=1, FragmentDelimiter="…"'
)


def tsquery_sql(count: int) -> str:
    """`plainto_tsquery('app_search', ?) || …`, one bound parameter per term."""
    return " || ".join(["plainto_tsquery('app_search', ?)"] * count)


def pg_hits(
    conn: DbConnection, user_id: int, terms: Sequence[str], limit: int, exclude_message_ids: Sequence[int]
) -> list[SearchHit]:
    """Up to `limit` message hits and `limit` memory hits (the caller keeps the best)."""
    if not terms:
        return []
    query = tsquery_sql(len(terms))
    excluded = [int(i) for i in exclude_message_ids] or [-1]
    roles = list(SEARCHED_ROLES)
    messages = conn.execute(
        f"""
        WITH q AS (SELECT {query} AS query)
        SELECT m.id, m.session_id, m.role, m.created_at,
               ts_headline('app_search', m.content, q.query, ?) AS snippet,
               -ts_rank_cd(m.search_vector, q.query) AS score
        FROM chat_messages m, q
        WHERE m.search_vector @@ q.query AND m.user_id = ? AND m.role = ANY(?) AND NOT (m.id = ANY(?))
        ORDER BY score, m.id DESC LIMIT ?
        """,
        (*terms, HEADLINE_OPTIONS, user_id, roles, excluded, limit),
    ).fetchall()
    memories = conn.execute(
        f"""
        WITH q AS (SELECT {query} AS query)
        SELECT m.id, m.created_at,
               ts_headline('app_search', m.content, q.query, ?) AS snippet,
               -ts_rank_cd(m.search_vector, q.query) AS score
        FROM user_memories m, q
        WHERE m.search_vector @@ q.query AND m.user_id = ?
        ORDER BY score, m.id DESC LIMIT ?
        """,
        (*terms, HEADLINE_OPTIONS, user_id, limit),
    ).fetchall()
    return [SearchHit.of_message(r) for r in messages] + [SearchHit.of_memory(r) for r in memories]
