"""What a full-text search finds, on either engine: the hit, the user's terms, the order rule.

The user's words are reduced to distinct lowercased terms, and each engine searches them as
plain words joined by OR (`storage.search_sqlite`: FTS5 phrases; `storage.search_pg`: one
`plainto_tsquery` each), so nothing a user types is read as query syntax. Lower scores are
better on both engines; ties go to the most recent row (`best`).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel

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

    @classmethod
    def of_message(cls, row: Any) -> SearchHit:
        """A message hit from a row of `id, session_id, role, created_at, snippet, score`."""
        return cls(
            source="message",
            id=row["id"],
            session_id=row["session_id"],
            role=row["role"],
            created_at=row["created_at"],
            snippet=row["snippet"],
            score=float(row["score"]),
        )

    @classmethod
    def of_memory(cls, row: Any) -> SearchHit:
        """A memory hit from a row of `id, created_at, snippet, score`."""
        return cls(
            source="memory",
            id=row["id"],
            session_id=None,
            role=None,
            created_at=row["created_at"],
            snippet=row["snippet"],
            score=float(row["score"]),
        )


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


def best(hits: list[SearchHit], limit: int) -> list[SearchHit]:
    """The first `limit` by score (lower is better), ties to the newest."""
    # Two stable sorts: newest first (then higher id), then best score; equal scores keep
    # that recency order.
    hits.sort(key=lambda hit: (hit.created_at, hit.id), reverse=True)
    hits.sort(key=lambda hit: hit.score)
    return hits[:limit]
