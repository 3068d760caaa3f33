"""`m104_accounts` on a database that already has users, tokens and web sessions (both engines):
the rows survive (SQLite rebuilds `web_sessions` to let `token_id` be NULL), and a password
sign-in's session (no token) can be stored afterwards."""

from __future__ import annotations

from datetime import timedelta

from storage.connection import Store
from storage.migrations import MIGRATIONS
from storage.users import create_user, find_token, tokens_of
from storage.web_sessions import open_web_session, web_session_user


def test_m104_keeps_existing_sessions_and_allows_password_sessions(blank_store: Store) -> None:
    before = tuple(step for step in MIGRATIONS if step.name != "m104_accounts")
    assert len(before) == len(MIGRATIONS) - 1
    blank_store.migrate(before)
    with blank_store.connection() as conn:
        conn.execute("INSERT INTO users(name, role, created_at) VALUES ('old', 'user', '2026-01-01T00:00:00.000Z')")
        user_id = conn.execute("SELECT id FROM users WHERE name = 'old'").fetchone()[0]
        conn.execute(
            "INSERT INTO api_tokens(user_id, token_hash, created_at) VALUES (?, 'h', '2026-01-01T00:00:00.000Z')",
            (user_id,),
        )
        token_id = conn.execute("SELECT id FROM api_tokens").fetchone()[0]
        conn.execute(
            "INSERT INTO web_sessions(id_hash, user_id, token_id, created_at, expires_at) "
            "VALUES ('s', ?, ?, '2026-01-01T00:00:00.000Z', '2999-01-01T00:00:00.000Z')",
            (user_id, token_id),
        )
    assert blank_store.migrate(MIGRATIONS) == ["m104_accounts"]
    with blank_store.connection() as conn:
        kept = conn.execute("SELECT user_id, token_id FROM web_sessions WHERE id_hash = 's'").fetchone()
        assert (kept[0], kept[1]) == (user_id, token_id)
        assert [token.label for token in tokens_of(conn, user_id)] == [None]
        conn.execute("DELETE FROM api_tokens WHERE id = ?", (token_id,))  # the cascade still ends its session
        assert conn.execute("SELECT COUNT(*) FROM web_sessions").fetchone()[0] == 0

        user, token = create_user(conn, "new")
        found = find_token(conn, token)
        assert found is not None and found[0].disabled_at is None
        session_id = open_web_session(conn, user.id, None, timedelta(hours=1))
        assert web_session_user(conn, session_id) == user
