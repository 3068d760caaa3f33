"""`storage/user_settings.py` on both engines (the `store` fixture: SQLite and PostgreSQL): a
user's settings round-trip, stay theirs, and a session's model is scoped by its owner."""

from __future__ import annotations

from storage.connection import Store
from storage.sessions import create_session
from storage.user_settings import (
    UserApproval,
    UserSettings,
    get_user_settings,
    save_user_settings,
    session_model,
    set_session_model,
)
from storage.users import create_user


def test_settings_round_trip_per_user(store: Store) -> None:
    with store.connection() as conn:
        alice, _ = create_user(conn, "alice")
        bob, _ = create_user(conn, "bob")
        assert get_user_settings(conn, alice.id) == UserSettings()
        wanted = UserSettings(
            theme="dark", system_prompt="Be brief.\u00e9", approval=UserApproval(commands=("remember", "run_code"))
        )
        save_user_settings(conn, alice.id, wanted)
        assert get_user_settings(conn, alice.id) == wanted
        save_user_settings(conn, alice.id, wanted.model_copy(update={"theme": "light"}))  # an update, not a second row
        assert get_user_settings(conn, alice.id).theme == "light"
        assert get_user_settings(conn, bob.id) == UserSettings()


def test_an_unreadable_approval_is_ignored_not_fatal(store: Store) -> None:
    with store.connection() as conn:
        alice, _ = create_user(conn, "alice")
        save_user_settings(conn, alice.id, UserSettings(theme="dark"))
        conn.execute("UPDATE user_settings SET approval = ? WHERE user_id = ?", ("not json", alice.id))
        assert get_user_settings(conn, alice.id) == UserSettings(theme="dark")


def test_a_sessions_model_belongs_to_its_owner(store: Store) -> None:
    with store.connection() as conn:
        alice, _ = create_user(conn, "alice")
        bob, _ = create_user(conn, "bob")
        session = create_session(conn, alice.id, "chat")
        assert session_model(conn, alice.id, session.id) is None
        assert set_session_model(conn, alice.id, session.id, "openai:b")
        assert session_model(conn, alice.id, session.id) == "openai:b"
        assert not set_session_model(conn, bob.id, session.id, "openai:c")  # another user's: not found
        assert session_model(conn, bob.id, session.id) is None
        assert session_model(conn, alice.id, session.id) == "openai:b"
        assert set_session_model(conn, alice.id, session.id, None)
        assert session_model(conn, alice.id, session.id) is None
