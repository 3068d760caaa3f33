"""The database layer, on both engines: connections, errors, messages, sessions, users,
concurrency (the migrations: test_migrations.py; what only PostgreSQL shows: test_postgres.py)."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import hypothesis
import psycopg
import pytest
from hypothesis import strategies as st

from storage.connection import DbConnection, Store
from storage.db import BUSY_TIMEOUT_MS, Database, transaction, utc_now, utc_text
from storage.db import translated as sqlite_translated
from storage.errors import (
    IntegrityViolation,
    StorageError,
    StorageFull,
    StorageLocked,
    StorageReadOnly,
    StorageUnavailable,
    storage_fault,
)
from storage.health import probe_database
from storage.messages import add_message, recent_messages
from storage.migrations import execute_script
from storage.pg_connection import PgRow
from storage.pg_errors import translated as pg_translated
from storage.search import search_user_history
from storage.sessions import create_session, delete_session, get_session, list_sessions, rename_session
from storage.users import DuplicateUserError, create_user, hash_token, user_for_token
from testing.disk_faults import database_files, read_only, require_fault_support

SQLITE_ONLY = pytest.mark.parametrize("backend", ["sqlite"])  # about SQLite itself (files, PRAGMAs, FTS5 tables)


@pytest.fixture
def database(store: Store) -> Store:
    """A migrated database on each backend (`store`, tests/pg_support.py): SQLite, PostgreSQL."""
    return store


@pytest.fixture
def conn(database: Database) -> Iterator[sqlite3.Connection]:
    conn = database.connect()
    yield conn
    conn.close()


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row["name"] for row in conn.execute(f"PRAGMA table_info({table})")]


def schema(conn: sqlite3.Connection) -> list[tuple[str, str, str | None]]:
    return [tuple(row) for row in conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")]


# --------------------------------------------------------------------------- migrations (tests/storage/test_migrations.py)


@SQLITE_ONLY
def test_incomplete_statement_in_a_migration_is_refused(conn: sqlite3.Connection) -> None:
    with pytest.raises(ValueError, match="incomplete SQL statement"):
        execute_script(conn, "SELECT 1;\nSELECT 2")


def test_transaction_rolls_back_on_error(conn: sqlite3.Connection) -> None:
    with pytest.raises(RuntimeError), transaction(conn):
        conn.execute("INSERT INTO users(name, created_at) VALUES ('ghost', 'x')")
        raise RuntimeError
    assert conn.execute("SELECT count(*) FROM users").fetchone()[0] == 0
    assert not conn.in_transaction


# --------------------------------------------------------------------------- connections


@SQLITE_ONLY
def test_connection_settings(conn: sqlite3.Connection) -> None:
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == BUSY_TIMEOUT_MS == 5000
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.isolation_level is None
    assert isinstance(conn.execute("SELECT 1 AS one").fetchone(), sqlite3.Row)


def test_foreign_keys_are_enforced(conn: DbConnection) -> None:
    with pytest.raises(IntegrityViolation):
        add_message(conn, session_id="missing", user_id=999, role="user", content="x")
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM chat_messages").fetchone()[0] == 0


def test_each_connection_is_new(database: Database) -> None:
    first, second = database.connect(), database.connect()
    try:
        assert first is not second
    finally:
        first.close()
        second.close()


@SQLITE_ONLY
def test_connection_cannot_cross_threads(conn: sqlite3.Connection) -> None:
    errors: list[BaseException] = []

    def use() -> None:
        try:
            conn.execute("SELECT 1")
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=use)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert isinstance(errors[0], StorageError) and isinstance(errors[0].__cause__, sqlite3.ProgrammingError)


def test_connection_context_manager_closes(database: Database) -> None:
    """A connection of a `with` block (PostgreSQL: a pooled one, handed back) is not usable after it."""
    with database.connection() as conn:
        conn.execute("SELECT 1")
    with pytest.raises(StorageError) as raised:
        conn.execute("SELECT 1")
    assert not storage_fault(raised.value)  # a bug of the caller, not the database's refusal


def test_each_thread_gets_its_own_connection(database: Store) -> None:
    seen: list[object] = []
    thread = threading.Thread(target=lambda: seen.append(database.thread_connection()))
    thread.start()
    thread.join()
    assert seen[0] is not database.thread_connection()
    assert database.thread_connection() is database.thread_connection()


def test_a_bad_statement_is_a_bug_not_a_storage_fault(conn: DbConnection) -> None:
    with pytest.raises(StorageError) as raised:
        conn.execute("SELECT no_such_column FROM users")
    assert not storage_fault(raised.value)
    assert conn.execute("SELECT 1").fetchone()[0] == 1  # the connection is still good


@SQLITE_ONLY
def test_a_connection_opened_while_the_file_was_read_only_is_replaced_once_it_is_writable(database: Database) -> None:
    """SQLite opens a file it cannot write read-only, silently, and such a connection never
    writes again: before the fix 57 of 60 turns failed after a read-only moment ended."""
    require_fault_support()
    with read_only(database_files(Path(database.path))):
        conn = database.thread_connection()
        with pytest.raises(StorageReadOnly, match="readonly") as refused:
            create_user(conn, "during")
        assert refused.value.code.startswith("SQLITE_READONLY") and storage_fault(refused.value)
        stuck = conn.held
        assert database.thread_connection().held is stuck  # still read-only: kept, reads work
        assert conn.execute("SELECT count(*) FROM users").fetchone()[0] == 0
    fresh = database.thread_connection()
    assert fresh.held is not stuck
    create_user(fresh, "after")
    healthy = fresh.held
    assert database.thread_connection().held is healthy  # a healthy connection is kept


@SQLITE_ONLY
def test_a_connection_whose_write_was_refused_is_replaced_even_if_it_looked_writable(database: Database) -> None:
    require_fault_support()
    conn = database.thread_connection()
    with read_only(database_files(Path(database.path))):
        stuck = database.connect()  # opened read-only, as a thread would meanwhile
    stuck.opened_read_only = False  # as if the open had raced with the fault: only the refusal tells
    assert not stuck.stale(database.path)
    with pytest.raises(StorageReadOnly):
        stuck.execute("INSERT INTO users(name, created_at) VALUES ('x', 'now')")
    assert stuck.stale(database.path) and not conn.stale(database.path)
    stuck.close()


def _sqlite_error(name: str) -> StorageError:
    error = sqlite3.IntegrityError("x") if name.startswith("SQLITE_CONSTRAINT") else sqlite3.OperationalError("x")
    error.sqlite_errorname = name  # type: ignore[attr-defined]
    return sqlite_translated(error)


def _pg_error(sqlstate: str) -> StorageError:
    cls = psycopg.errors.lookup(sqlstate) if sqlstate else psycopg.OperationalError
    return pg_translated(cls("x"))


# each engine's error names -> the one class both raise (a StorageFault is a 503; the rest are bugs)
ERRORS = [
    ("sqlite", "SQLITE_READONLY", StorageReadOnly),
    ("sqlite", "SQLITE_READONLY_DBMOVED", StorageReadOnly),
    ("sqlite", "SQLITE_FULL", StorageFull),
    ("sqlite", "SQLITE_BUSY", StorageLocked),
    ("sqlite", "SQLITE_LOCKED", StorageLocked),
    ("sqlite", "SQLITE_IOERR_WRITE", StorageUnavailable),
    ("sqlite", "SQLITE_CANTOPEN", StorageUnavailable),
    ("sqlite", "SQLITE_CONSTRAINT_UNIQUE", IntegrityViolation),
    ("sqlite", "SQLITE_ERROR", StorageError),
    ("sqlite", "", StorageError),
    ("postgresql", "25006", StorageReadOnly),  # read-only transaction (a standby)
    ("postgresql", "53100", StorageFull),  # disk full
    ("postgresql", "53300", StorageFull),  # too many connections
    ("postgresql", "55P03", StorageLocked),  # lock_timeout
    ("postgresql", "40P01", StorageLocked),  # deadlock
    ("postgresql", "08006", StorageUnavailable),  # connection failure
    ("postgresql", "57P01", StorageUnavailable),  # admin shutdown
    ("postgresql", "", StorageUnavailable),  # the client lost the connection (no SQLSTATE)
    ("postgresql", "23505", IntegrityViolation),  # unique violation
    ("postgresql", "42703", StorageError),  # undefined column: a bug
    ("postgresql", "57014", StorageError),  # statement_timeout: the statement's, not the server's
]


@pytest.mark.parametrize(("engine", "name", "expected"), ERRORS)
def test_storage_faults_are_told_from_bugs(engine: str, name: str, expected: type[StorageError]) -> None:
    error = _sqlite_error(name) if engine == "sqlite" else _pg_error(name)
    assert type(error) is expected and error.code == name
    assert storage_fault(error) is (expected not in (StorageError, IntegrityViolation))
    assert not isinstance(error, sqlite3.Error | psycopg.Error) and error.__cause__ is not None


# --------------------------------------------------------------------------- timestamps

ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def test_utc_now_format() -> None:
    value = utc_now()
    assert ISO_MS.fullmatch(value), value
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert abs((datetime.now(UTC) - parsed).total_seconds()) < 5


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (datetime(2026, 1, 2, 3, 4, 5, 0, tzinfo=UTC), "2026-01-02T03:04:05.000Z"),
        (datetime(2026, 1, 2, 3, 4, 5, 999_999, tzinfo=UTC), "2026-01-02T03:04:05.999Z"),
        (datetime(2026, 12, 31, 23, 59, 59, 120_000, tzinfo=UTC), "2026-12-31T23:59:59.120Z"),
    ],
)
def test_utc_text_always_three_digits(moment: datetime, expected: str) -> None:
    assert utc_text(moment) == expected


def test_utc_now_is_stored_text_of_now() -> None:
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z", utc_now())


# --------------------------------------------------------------------------- messages


@pytest.fixture
def alice(conn: sqlite3.Connection) -> int:
    return create_user(conn, "alice")[0].id


@pytest.fixture
def bob(conn: sqlite3.Connection) -> int:
    return create_user(conn, "bob")[0].id


def insert_raw(conn: sqlite3.Connection, session_id: str, user_id: int, content: str, created_at: str) -> int:
    cursor = conn.execute(
        "INSERT INTO chat_messages(session_id, user_id, role, content, created_at) VALUES (?, ?, 'user', ?, ?)"
        " RETURNING id",
        (session_id, user_id, content, created_at),
    )
    return int(cursor.fetchone()[0])


def test_messages_are_ordered_by_id_not_timestamp(conn: sqlite3.Connection, alice: int) -> None:
    session = create_session(conn, alice)
    stamps = [
        "2026-01-01T00:00:05.000Z",
        "2026-01-01T00:00:05.000Z",
        "2025-01-01T00:00:00.000Z",
        "2027-01-01T00:00:00.000Z",
        "2024-06-01T00:00:00.000Z",
    ]
    ids = [insert_raw(conn, session.id, alice, f"m{i}", stamp) for i, stamp in enumerate(stamps)]
    messages = recent_messages(conn, session.id, 10)
    assert [m.id for m in messages] == ids
    assert [m.content for m in messages] == ["m0", "m1", "m2", "m3", "m4"]
    assert [m.created_at for m in messages] == stamps


def test_add_message_round_trip(conn: sqlite3.Connection, alice: int) -> None:
    session = create_session(conn, alice)
    stored = add_message(
        conn, session_id=session.id, user_id=alice, role="web_search_tools", content="c", meta={"ok": True, "n": [1, 2]}
    )
    plain = add_message(conn, session_id=session.id, user_id=alice, role="user", content="hi")
    assert ISO_MS.fullmatch(stored.created_at)
    assert recent_messages(conn, session.id, 10) == [stored, plain]
    assert plain.public() == {
        "id": plain.id,
        "session_id": session.id,
        "role": "user",
        "content": "hi",
        "created_at": plain.created_at,
        "parent_id": stored.id,
    }
    assert stored.public()["meta"] == {"ok": True, "n": [1, 2]}


@pytest.mark.parametrize(
    ("limit", "before", "expected"),
    [
        (3, None, [7, 8, 9]),
        (10, None, list(range(10))),
        (50, None, list(range(10))),
        (1, None, [9]),
        (3, 5, [2, 3, 4]),
        (10, 5, [0, 1, 2, 3, 4]),
        (3, 1, [0]),
        (3, 0, []),
        (0, None, []),
        (2, 10_000, [8, 9]),
    ],
)
def test_recent_messages_limit_and_before(
    conn: sqlite3.Connection, alice: int, limit: int, before: int | None, expected: list[int]
) -> None:
    session = create_session(conn, alice)
    other = create_session(conn, alice)
    ids: list[int] = []
    for i in range(10):
        ids.append(add_message(conn, session_id=session.id, user_id=alice, role="user", content=f"m{i}").id)
        add_message(conn, session_id=other.id, user_id=alice, role="user", content=f"other {i}")
    before_id = None if before is None else (ids[before] if before < len(ids) else before)
    messages = recent_messages(conn, session.id, limit, before_id=before_id)
    assert [m.content for m in messages] == [f"m{i}" for i in expected]
    assert all(m.session_id == session.id for m in messages)


# --------------------------------------------------------------------------- sessions


def test_sessions_are_scoped_by_user(conn: sqlite3.Connection, alice: int, bob: int) -> None:
    mine = create_session(conn, alice, "mine")
    theirs = create_session(conn, bob, "theirs")
    assert get_session(conn, alice, mine.id) == mine
    assert get_session(conn, alice, theirs.id) is None
    assert get_session(conn, alice, "no-such-id") is None
    assert [s.id for s in list_sessions(conn, alice)] == [mine.id]

    assert rename_session(conn, alice, theirs.id, "stolen") is None
    assert get_session(conn, bob, theirs.id).name == "theirs"  # type: ignore[union-attr]
    renamed = rename_session(conn, alice, mine.id, "renamed")
    assert renamed is not None and renamed.name == "renamed"

    assert delete_session(conn, alice, theirs.id) is False
    assert get_session(conn, bob, theirs.id) is not None
    assert delete_session(conn, alice, "no-such-id") is False
    assert delete_session(conn, alice, mine.id) is True
    assert get_session(conn, alice, mine.id) is None
    assert delete_session(conn, alice, mine.id) is False


def test_new_session_has_default_name(conn: sqlite3.Connection, alice: int) -> None:
    session = create_session(conn, alice)
    assert session.name == "New chat"
    assert ISO_MS.fullmatch(session.created_at)
    assert session.created_at == session.updated_at


FTS_IDS = {  # the engine's own full-text index, read directly (FTS5 table, or tsvector column)
    "sqlite": "SELECT rowid FROM chat_messages_fts WHERE chat_messages_fts MATCH ?",
    "postgresql": "SELECT id FROM chat_messages WHERE search_vector @@ plainto_tsquery('app_search', ?)",
}


def fts_ids(database: Store, conn: DbConnection, word: str) -> list[int]:
    """Ids of the messages the full-text index finds `word` in."""
    return sorted(row[0] for row in conn.execute(FTS_IDS[database.dialect], (word,)))


def test_deleting_a_session_cascades_to_messages_and_index(database: Store, conn: DbConnection, alice: int) -> None:
    doomed = create_session(conn, alice)
    kept = create_session(conn, alice)
    gone = [
        add_message(conn, session_id=doomed.id, user_id=alice, role=role, content="zebra stripes").id
        for role in ("user", "web_search_tools", "assistant")
    ]
    stays = add_message(conn, session_id=kept.id, user_id=alice, role="user", content="zebra crossing").id
    assert fts_ids(database, conn, "zebra") == sorted([*gone, stays])

    assert delete_session(conn, alice, doomed.id)
    remaining = conn.execute("SELECT id FROM chat_messages").fetchall()
    assert [row[0] for row in remaining] == [stays]
    assert fts_ids(database, conn, "zebra") == [stays]
    assert fts_ids(database, conn, "stripes") == []
    if database.dialect == "sqlite":
        conn.execute("INSERT INTO chat_messages_fts(chat_messages_fts, rank) VALUES ('integrity-check', 1)")


def test_updating_a_message_reindexes_it(database: Store, conn: DbConnection, alice: int) -> None:
    session = create_session(conn, alice)
    message = add_message(conn, session_id=session.id, user_id=alice, role="user", content="old words")
    conn.execute("UPDATE chat_messages SET content = 'new text' WHERE id = ?", (message.id,))
    assert fts_ids(database, conn, "old") == []
    assert fts_ids(database, conn, "new") == [message.id]


# --------------------------------------------------------------------------- search (the tool: tests/tools/test_memory_tools.py)


@pytest.mark.parametrize(
    "query",
    ["mars & !rover", "mars:* | (rover", "'quoted' \"double\"", "a <-> b", "\\", "%s %(x)s", "ünïcödé", "  "],
)
def test_nothing_a_user_types_is_read_as_query_syntax(database: Store, conn: DbConnection, query: str) -> None:
    """Neither FTS5's syntax nor tsquery's (`!`, `&`, `:*`, quotes, `<->`) is read in a user's words."""
    alice, _ = create_user(conn, "alice")
    session = create_session(conn, alice.id)
    add_message(conn, session_id=session.id, user_id=alice.id, role="user", content="the mars rover b")
    hits = search_user_history(database, conn, alice.id, query)
    assert all(hit.source == "message" for hit in hits)


def test_search_is_scoped_to_the_user_and_ranked_alike(database: Store, conn: DbConnection) -> None:
    alice, bob = create_user(conn, "alice")[0].id, create_user(conn, "bob")[0].id
    mine, theirs = create_session(conn, alice), create_session(conn, bob)
    one = add_message(conn, session_id=mine.id, user_id=alice, role="user", content="a rover on mars").id
    add_message(conn, session_id=mine.id, user_id=alice, role="user", content="just a rover")
    add_message(conn, session_id=theirs.id, user_id=bob, role="user", content="bob's rover on mars")
    hits = search_user_history(database, conn, alice, "Mars rover")
    assert [hit.id for hit in hits][0] == one and len(hits) == 2  # more terms first; never bob's
    assert hits[0].snippet == "a **rover** on **mars**"
    assert hits[0].score < hits[1].score < 0


@pytest.fixture
def searched(database: Store, conn: DbConnection) -> tuple[Store, DbConnection, int]:
    alice = create_user(conn, "alice")[0].id
    session = create_session(conn, alice)
    for text in ("the quick brown fox", "Café Zürich at noon", "100% sure: a & b | !c"):
        add_message(conn, session_id=session.id, user_id=alice, role="user", content=text)
    return database, conn, alice


@hypothesis.settings(
    max_examples=150, deadline=None, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture]
)
@hypothesis.given(st.text(max_size=120))
def test_search_never_fails_on_any_text(searched: tuple[Store, DbConnection, int], query: str) -> None:
    database, conn, alice = searched
    hits = search_user_history(database, conn, alice, query)
    assert all(hit.snippet and hit.score <= 0 for hit in hits)
    assert not conn.in_transaction


# --------------------------------------------------------------------------- users


@SQLITE_ONLY
def test_tokens_are_stored_only_as_hashes(database: Database, conn: sqlite3.Connection) -> None:
    user, token = create_user(conn, "carol")
    assert token.startswith("oct_") and len(token) > 40
    stored = conn.execute("SELECT token_hash FROM api_tokens WHERE user_id = ?", (user.id,)).fetchone()[0]
    assert stored == hash_token(token) == hashlib.sha256(token.encode()).hexdigest()
    dump = "\n".join(conn.iterdump())
    assert token not in dump
    assert token[4:] not in dump
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for path in Path(database.path).parent.glob("t.db*"):
        assert token.encode() not in path.read_bytes()


def test_user_for_token(conn: sqlite3.Connection) -> None:
    carol, carol_token = create_user(conn, "carol")
    dave, dave_token = create_user(conn, "dave", role="admin")
    assert user_for_token(conn, carol_token) == carol
    assert user_for_token(conn, dave_token) == dave
    assert dave.role == "admin"
    for wrong in ("", "oct_", carol_token + "x", carol_token[:-1], carol_token.upper(), hash_token(carol_token)):
        assert user_for_token(conn, wrong) is None


def test_tokens_are_unique(conn: sqlite3.Connection) -> None:
    tokens = {create_user(conn, f"user{i}")[1] for i in range(5)}
    assert len(tokens) == 5


def test_duplicate_user_name(conn: sqlite3.Connection) -> None:
    create_user(conn, "carol")
    with pytest.raises(DuplicateUserError):
        create_user(conn, "carol")
    assert conn.execute("SELECT count(*) FROM users").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM api_tokens").fetchone()[0] == 1
    assert not conn.in_transaction


def test_values_with_quotes_question_marks_and_percents_round_trip(database: Store) -> None:
    """Values are parameters on both engines, whatever they hold (PostgreSQL: `?` translated outside literals)."""
    conn = database.thread_connection()
    user, _ = create_user(conn, "o'brien?%s")
    session = create_session(conn, user.id, "it's 100% ?")
    text = "'; DROP TABLE users; -- ? %s %(x)s $1 \\ \x01 é"
    stored = add_message(conn, session_id=session.id, user_id=user.id, role="user", content=text)
    assert recent_messages(conn, session.id, 5)[0] == stored
    assert stored.content == text


def test_rows_read_by_name_and_index_alike(database: Store) -> None:
    row = database.thread_connection().execute("SELECT 1 AS one, 'two' AS two").fetchone()
    assert isinstance(row, PgRow if database.dialect == "postgresql" else sqlite3.Row)
    assert (row[0], row["one"], row[1], row["two"], tuple(row), dict(row)) == (
        1,
        1,
        "two",
        "two",
        (1, "two"),
        {"one": 1, "two": "two"},
    )


# --------------------------------------------------------------------------- concurrency


def test_concurrent_writers(database: Database, conn: sqlite3.Connection, alice: int) -> None:
    session = create_session(conn, alice)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer(n: int) -> None:
        own = database.connect()
        try:
            start.wait()
            for i in range(50):
                add_message(own, session_id=session.id, user_id=alice, role="user", content=f"t{n} m{i}")
        except BaseException as error:
            errors.append(error)
        finally:
            own.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert conn.execute("SELECT count(*) FROM chat_messages WHERE session_id = ?", (session.id,)).fetchone()[0] == 400
    messages = recent_messages(conn, session.id, 1000)
    assert len(messages) == 400
    for n in range(8):  # each writer's rows keep their own order
        own = [int(m.content.split("m")[1]) for m in messages if m.content.startswith(f"t{n} ")]
        assert own == list(range(50))
    assert len(fts_ids(database, conn, "m0")) == 8


def test_deleting_a_long_session_writes_in_short_batches(
    database: Database, conn: sqlite3.Connection, alice: int, bob: int
):
    """SPEC 12: a write transaction holds the lock for at most 100 ms. A session's messages
    are deleted DELETE_BATCH at a time, each statement its own transaction, with the lock
    left free between them: another connection's write gets in while a long session is
    being deleted, instead of waiting for the whole of it."""
    from storage.sessions import DELETE_BATCH

    class Recording:  # the connection delete_session is given, recording its deletes
        def __init__(self) -> None:
            self.deletes: list[tuple[int, bool]] = []

        def execute(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
            cursor = conn.execute(sql, params)
            if sql.startswith("DELETE FROM chat_messages"):
                self.deletes.append((cursor.rowcount, conn.in_transaction))
            return cursor

    long = create_session(conn, alice, "long")
    other = create_session(conn, bob, "other")
    with transaction(conn):
        for n in range(DELETE_BATCH * 8 + 7):
            add_message(conn, session_id=long.id, user_id=alice, role="user", content=f"message {n} about tea")
        add_message(conn, session_id=other.id, user_id=bob, role="user", content="about tea too")
    recording = Recording()
    meanwhile: list[int] = []
    finished = threading.Event()

    def write_meanwhile() -> None:  # bob writes while alice's session is being deleted
        with database.connection() as writer:
            while not recording.deletes and not finished.is_set():
                time.sleep(0.001)
            add_message(writer, session_id=other.id, user_id=bob, role="user", content="written meanwhile")
            meanwhile.append(len(recording.deletes))

    thread = threading.Thread(target=write_meanwhile)
    thread.start()
    assert delete_session(recording, alice, long.id)  # type: ignore[arg-type]
    finished.set()
    thread.join()
    assert recording.deletes == [(DELETE_BATCH, False)] * 8 + [(7, False)]
    assert meanwhile and meanwhile[0] < 9, "the other writer waited for the whole deletion"
    assert get_session(conn, alice, long.id) is None
    assert conn.execute("SELECT count(*) FROM chat_messages WHERE session_id = ?", (long.id,)).fetchone()[0] == 0
    assert [m.content for m in recent_messages(conn, other.id, 10)] == ["about tea too", "written meanwhile"]
    assert not delete_session(conn, bob, long.id)


def test_activities_problems_and_submissions_round_trip_on_both_backends(store: Store) -> None:
    from storage.problems import (
        activity_problems,
        add_problem,
        add_submission,
        create_activity,
        get_problem,
        list_activities,
        set_activity_status,
    )

    with store.connection() as conn:
        alice = create_user(conn, "alice")[0].id
        session = create_session(conn, alice)
        first = create_activity(
            conn, user_id=alice, session_id=session.id, topic="loops", language="python", difficulty="easy", count=2
        )
        second = create_activity(
            conn, user_id=alice, session_id=session.id, topic="maps", language="python", difficulty="easy", count=1
        )
        set_activity_status(conn, first.id, "ready")
        problem = add_problem(
            conn,
            user_id=alice,
            activity_id=first.id,
            language="python",
            difficulty="easy",
            title="Sum",
            statement="Add 100% of it",
            starter_files={"main.py": "x = '?'\n"},
            reference_files={"main.py": "print(1)\n"},
            tests=[{"name": "t", "stdin": "", "expected": "1\n"}],
        )
        submission = add_submission(
            conn,
            user_id=alice,
            problem_id=problem.id,
            language="python",
            files={"main.py": "print(1)\n"},
            verdict={"status": "passed"},
        )
        assert submission.id > 0
        assert [a.id for a in list_activities(conn, alice)] == [second.id, first.id]  # newest first, rowid on ties
        assert get_problem(conn, alice, problem.id) == problem
        assert activity_problems(conn, alice, first.id) == [problem]
        assert get_problem(conn, alice + 1, problem.id) is None


def test_write_transactions_do_not_interleave_on_either_backend(store: Store) -> None:
    """A profile write reads the JSON, changes it and writes it back in one `transaction()`:
    on PostgreSQL, as on SQLite, two such transactions never interleave (no lost update)."""
    import threading

    from storage.profile import get_profile, set_field

    with store.connection() as conn:
        alice = create_user(conn, "alice")[0].id
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def writer(n: int) -> None:
        try:
            with store.connection() as own:
                start.wait()
                for i in range(8):
                    set_field(own, alice, f"f{n}_{i}", i, source="api")
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with store.connection() as conn:
        assert len(get_profile(conn, alice)) == 48


PROBE_TABLE = {  # is the health probe's table there?
    "sqlite": "SELECT count(*) FROM sqlite_master WHERE name = '_health_probe'",
    "postgresql": "SELECT count(*) FROM pg_class WHERE relname = '_health_probe'",
}


def test_the_health_probe_writes_and_leaves_nothing(database: Store) -> None:
    health = probe_database(database)
    assert health.ok and health.state == "ok", health.detail
    with database.connection() as conn:
        assert conn.execute(PROBE_TABLE[database.dialect]).fetchone()[0] == 0  # rolled back
