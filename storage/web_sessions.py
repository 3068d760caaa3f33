"""The web UI's login sessions, kept on the server so that logging out (or revoking the
token that logged in) really ends them.

The cookie carries only a random 256-bit id; the table keeps its SHA-256 (like API tokens),
the user, the token it was opened with (revoking or rotating that token deletes the row by
cascade; NULL for a password login) and an absolute expiry. A disabled user's sessions are
deleted when they are disabled, and never match a lookup anyway. Checking a cookie is one indexed read; nothing is written
per request. Each user keeps at most `MAX_PER_USER` live sessions: a new login ends the
oldest, so repeated logins cannot grow the table.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

from storage.connection import DbConnection
from storage.db import transaction, utc_now
from storage.users import User, hash_token, user_from_row

MAX_PER_USER = 20


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def open_web_session(conn: DbConnection, user_id: int, token_id: int | None, lifetime: timedelta) -> str:
    """A new session for `user_id`; returns its id (shown once: it goes in the cookie)."""
    session_id = secrets.token_urlsafe(32)
    now = datetime.now(UTC)
    with transaction(conn):
        conn.execute("DELETE FROM web_sessions WHERE user_id = ? AND expires_at <= ?", (user_id, _iso(now)))
        conn.execute(
            "INSERT INTO web_sessions(id_hash, user_id, token_id, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
            (hash_token(session_id), user_id, token_id, _iso(now), _iso(now + lifetime)),
        )
        conn.execute(
            "DELETE FROM web_sessions WHERE user_id = ? AND id_hash NOT IN (SELECT id_hash FROM web_sessions "
            "WHERE user_id = ? ORDER BY created_at DESC, rowid DESC LIMIT ?)",
            (user_id, user_id, MAX_PER_USER),
        )
    return session_id


def web_session_user(conn: DbConnection, session_id: str) -> User | None:
    """The user of a live (not ended, not expired) session, else None."""
    row = conn.execute(
        "SELECT u.* FROM web_sessions s JOIN users u ON u.id = s.user_id "
        "WHERE s.id_hash = ? AND s.expires_at > ? AND u.disabled_at IS NULL",
        (hash_token(session_id), utc_now()),
    ).fetchone()
    return user_from_row(row) if row else None


def close_web_session(conn: DbConnection, session_id: str) -> bool:
    cursor = conn.execute("DELETE FROM web_sessions WHERE id_hash = ?", (hash_token(session_id),))
    return cursor.rowcount > 0


def close_password_sessions(conn: DbConnection, user_id: int, keep: str | None = None) -> int:
    """End the user's sessions opened with a password (a new password ends them), except
    `keep` (the session that changed it); sessions opened with a token live as long as it."""
    kept = hash_token(keep) if keep is not None else ""
    cursor = conn.execute(
        "DELETE FROM web_sessions WHERE user_id = ? AND token_id IS NULL AND id_hash <> ?", (user_id, kept)
    )
    return int(cursor.rowcount)


def count_web_sessions(conn: DbConnection, user_id: int) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM web_sessions WHERE user_id = ?", (user_id,)).fetchone()[0])
