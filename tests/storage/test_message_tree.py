"""Messages as a tree (SPEC 17, migration `m103_message_tree`), on SQLite and PostgreSQL.

Every stored row hangs under its session's active leaf and becomes it; a fork moves the leaf
first; `recent_messages` reads the active branch only (and pages up it); an existing database
is backfilled into one branch per session.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from storage.connection import DbConnection, Store
from storage.db import utc_now
from storage.messages import (
    active_leaf,
    add_message,
    newest_leaf_below,
    on_active_branch,
    recent_messages,
    session_tree,
    set_active_leaf,
    set_turn_error,
    siblings,
)
from storage.migrations import MIGRATIONS
from storage.sessions import create_session, delete_session
from storage.users import create_user


@pytest.fixture
def conn(store: Store) -> Iterator[DbConnection]:
    with store.connection() as connection:
        yield connection


def user(conn: DbConnection, name: str = "alice") -> int:
    created, _ = create_user(conn, name)
    return created.id


def add(conn: DbConnection, session_id: str, user_id: int, role: str, content: str) -> int:
    return add_message(conn, session_id=session_id, user_id=user_id, role=role, content=content).id


def contents(conn: DbConnection, session_id: str, limit: int = 100, before: int | None = None) -> list[str]:
    return [m.content for m in recent_messages(conn, session_id, limit, before_id=before)]


def test_each_row_hangs_under_the_leaf_and_a_fork_starts_a_sibling(conn: DbConnection) -> None:
    alice = user(conn)
    session = create_session(conn, alice).id
    q1 = add(conn, session, alice, "user", "q1")
    a1 = add(conn, session, alice, "assistant", "a1")
    assert active_leaf(conn, session) == a1
    set_active_leaf(conn, session, q1)  # regenerate: the fork is the user message
    t2 = add(conn, session, alice, "memory_tools", "tool result")
    a2 = add(conn, session, alice, "assistant", "a2")
    assert contents(conn, session) == ["q1", "tool result", "a2"]  # user, <x>_tools, assistant, by id
    assert [m.parent_id for m in recent_messages(conn, session, 10)] == [None, q1, t2]
    assert siblings(conn, session, recent_messages(conn, session, 10)) == {t2: [a1, t2]}
    assert on_active_branch(conn, session, t2) and not on_active_branch(conn, session, a1)

    set_active_leaf(conn, session, None)  # an edit of the first message: a new root
    q1b = add(conn, session, alice, "user", "q1 edited")
    assert contents(conn, session) == ["q1 edited"]
    assert siblings(conn, session, recent_messages(conn, session, 10)) == {q1b: [q1, q1b]}

    set_active_leaf(conn, session, newest_leaf_below(conn, session, q1))
    assert active_leaf(conn, session) == a2
    assert contents(conn, session) == ["q1", "tool result", "a2"]
    assert [m.id for m in session_tree(conn, session)] == [q1, a1, t2, a2, q1b]


def test_branch_pages_go_up_their_own_branch(conn: DbConnection) -> None:
    alice = user(conn)
    session = create_session(conn, alice).id
    ids = [add(conn, session, alice, "user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(10)]
    set_active_leaf(conn, session, ids[5])
    for i in range(3):  # another version after m5, whose rows have larger ids
        add(conn, session, alice, "assistant", f"other {i}")
    assert contents(conn, session, 3) == ["other 0", "other 1", "other 2"]
    assert contents(conn, session, 3, before=ids[9]) == ["m6", "m7", "m8"]  # the page of the other branch
    newest = recent_messages(conn, session, 4)
    assert contents(conn, session, 4, before=newest[0].id) == ["m1", "m2", "m3", "m4"]  # above m5
    assert contents(conn, session, 100, before=10**9) == [*[f"m{i}" for i in range(6)], "other 0", "other 1", "other 2"]
    assert contents(conn, session, 3, before=10**9) == ["other 0", "other 1", "other 2"]
    other = create_session(conn, alice).id
    assert contents(conn, other, 10, before=ids[3]) == []  # a message of another session pages nothing


def test_the_failure_mark_is_kept_and_cleared(conn: DbConnection) -> None:
    alice = user(conn)
    session = create_session(conn, alice).id
    q = add_message(conn, session_id=session, user_id=alice, role="user", content="q", meta={"images": []})
    set_turn_error(conn, q.id, {"code": "provider_unavailable", "message": "down"})
    (stored,) = recent_messages(conn, session, 1)
    assert stored.meta == {"images": [], "turn_error": {"code": "provider_unavailable", "message": "down"}}
    set_turn_error(conn, q.id, None)
    assert recent_messages(conn, session, 1)[0].meta == {"images": []}


def test_a_long_branched_session_deletes(conn: DbConnection) -> None:
    alice = user(conn)
    session = create_session(conn, alice).id
    first = add(conn, session, alice, "user", "root")
    for i in range(1200):  # deeper than SQLite's trigger recursion limit, in case deletes cascaded
        add(conn, session, alice, "assistant", f"m{i}")
    set_active_leaf(conn, session, first)
    add(conn, session, alice, "assistant", "another version")
    assert delete_session(conn, alice, session)
    assert conn.execute("SELECT count(*) FROM chat_messages").fetchone()[0] == 0


def test_an_old_database_is_backfilled_into_one_branch_per_session(blank_store: Store) -> None:
    before_tree = tuple(m for m in MIGRATIONS if m.name != "m103_message_tree")
    assert len(before_tree) == len(MIGRATIONS) - 1
    blank_store.migrate(before_tree)
    with blank_store.connection() as conn:
        alice = user(conn)
        sessions = [create_session(conn, alice).id for _ in range(2)]
        empty = create_session(conn, alice).id
        now = utc_now()
        for i in range(6):  # interleaved, as two chats written at once
            conn.execute(
                "INSERT INTO chat_messages(session_id, user_id, role, content, created_at) VALUES (?, ?, ?, ?, ?)",
                (sessions[i % 2], alice, "user", f"s{i % 2} m{i}", now),
            )
    assert blank_store.migrate() == ["m103_message_tree"]
    with blank_store.connection() as conn:
        for index, session in enumerate(sessions):
            branch = recent_messages(conn, session, 10)
            assert [m.content for m in branch] == [f"s{index} m{i}" for i in range(index, 6, 2)]
            assert [m.parent_id for m in branch] == [None, *[m.id for m in branch[:-1]]]
            assert active_leaf(conn, session) == branch[-1].id
        assert active_leaf(conn, empty) is None and recent_messages(conn, empty, 10) == []
        add(conn, sessions[0], alice, "assistant", "after the migration")
        assert contents(conn, sessions[0])[-2:] == ["s0 m4", "after the migration"]
