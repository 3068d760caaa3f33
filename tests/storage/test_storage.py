"""The database layer: migrations, connection settings, messages, sessions, users, concurrency."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from storage.connection import Store, dialect_of
from storage.db import BUSY_TIMEOUT_MS, Database, storage_fault, transaction, utc_now, utc_text
from storage.messages import add_message, recent_messages
from storage.migrations import MIGRATIONS, execute_script, m001_initial
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


# --------------------------------------------------------------------------- migrations

EXPECTED_COLUMNS = {
    "users": ["id", "name", "role", "profile", "created_at"],
    "api_tokens": ["id", "user_id", "token_hash", "created_at"],
    "sessions": ["id", "user_id", "name", "created_at", "updated_at"],
    "chat_messages": ["id", "session_id", "user_id", "role", "content", "meta", "created_at"],
    "user_memories": ["id", "user_id", "content", "importance", "created_at", "updated_at"],
    "_migrations": ["name", "applied_at"],
}


def test_blank_database_gets_every_table_and_column(tmp_path: Path) -> None:
    database = Database(tmp_path / "blank.db")
    applied = database.migrate()
    assert applied == [migration.__name__ for migration in MIGRATIONS]
    with database.connection() as conn:
        for table, expected in EXPECTED_COLUMNS.items():
            assert columns(conn, table) == expected, table
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert {"chat_messages_fts", "user_memories_fts"} <= names
        assert {"messages_by_session", "messages_by_user", "memories_by_user", "sessions_by_user"} <= names
        recorded = [row[0] for row in conn.execute("SELECT name FROM _migrations ORDER BY rowid")]
        assert recorded == applied
        for (applied_at,) in conn.execute("SELECT applied_at FROM _migrations"):
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", applied_at)


def test_migrating_twice_is_a_no_op(tmp_path: Path) -> None:
    database = Database(tmp_path / "twice.db")
    database.migrate()
    with database.connection() as conn:
        before = schema(conn)
        recorded = conn.execute("SELECT name, applied_at FROM _migrations ORDER BY name").fetchall()
    assert database.migrate() == []
    with database.connection() as conn:
        assert schema(conn) == before
        assert conn.execute("SELECT name, applied_at FROM _migrations ORDER BY name").fetchall() == recorded


RACING_MIGRATOR = """
import os, sys, time
sys.path.insert(0, os.getcwd())
from storage.db import Database
start = float(sys.argv[2])
while time.time() < start:  # every process leaves this line within a millisecond of the others
    pass
print(",".join(Database(sys.argv[1]).migrate()))
"""


@pytest.mark.parametrize("trial", range(3))
def test_processes_starting_at_once_on_a_fresh_file_migrate_it_once(tmp_path: Path, trial: int) -> None:
    """Real processes, released at the same instant on one fresh file: before the runner
    re-read `_migrations` under the write lock, about one in five died with "table ...
    already exists" (11 of 60 processes over 10 such starts)."""
    path = tmp_path / f"race{trial}.db"
    start = f"{time.time() + 1.5:.3f}"  # after the interpreters have started
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RACING_MIGRATOR, str(path), start],
            cwd=Path(__file__).parents[2],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    outputs = [process.communicate(timeout=60) for process in processes]
    assert [(process.returncode, err[-300:]) for process, (_, err) in zip(processes, outputs, strict=True)] == [
        (0, "")
    ] * 6
    applied = [name for out, _ in outputs for name in out.strip().split(",") if name]
    assert sorted(applied) == sorted(migration.__name__ for migration in MIGRATIONS)  # each applied exactly once
    with Database(path).connection() as conn:
        assert [row[0] for row in conn.execute("SELECT name FROM _migrations ORDER BY rowid")] == [
            migration.__name__ for migration in MIGRATIONS
        ]
        for table, expected in EXPECTED_COLUMNS.items():
            assert columns(conn, table) == expected, table


def test_failing_migration_rolls_back(tmp_path: Path) -> None:
    def m002_broken(conn: sqlite3.Connection) -> None:
        execute_script(conn, "CREATE TABLE half_done (id INTEGER PRIMARY KEY);\nINSERT INTO half_done VALUES (1);")
        conn.execute("ALTER TABLE users ADD COLUMN nickname TEXT")
        raise RuntimeError("boom")

    database = Database(tmp_path / "broken.db")
    with pytest.raises(RuntimeError, match="boom"):
        database.migrate((m001_initial, m002_broken))
    with database.connection() as conn:
        assert not conn.in_transaction
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert "half_done" not in names
        assert "nickname" not in columns(conn, "users")
        assert [row[0] for row in conn.execute("SELECT name FROM _migrations")] == ["m001_initial"]

    def m002_fixed(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (id INTEGER PRIMARY KEY)")

    m002_fixed.__name__ = "m002_broken"
    assert database.migrate((m001_initial, m002_fixed)) == ["m002_broken"]


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


def test_foreign_keys_are_enforced(conn: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError):
        add_message(conn, session_id="missing", user_id=999, role="user", content="x")


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
    assert isinstance(errors[0], sqlite3.ProgrammingError)


def test_connection_context_manager_closes(database: Database) -> None:
    with database.connection() as conn:
        conn.execute("SELECT 1")
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")


@SQLITE_ONLY
def test_a_connection_opened_while_the_file_was_read_only_is_replaced_once_it_is_writable(database: Database) -> None:
    """SQLite opens a file it cannot write read-only, silently, and such a connection never
    writes again: before the fix 57 of 60 turns failed after a read-only moment ended."""
    require_fault_support()
    with read_only(database_files(Path(database.path))):
        conn = database.thread_connection()
        with pytest.raises(sqlite3.OperationalError, match="readonly") as refused:
            create_user(conn, "during")
        assert refused.value.sqlite_errorname.startswith("SQLITE_READONLY")
        assert database.thread_connection() is conn  # still read-only: kept, reads work
        assert conn.execute("SELECT count(*) FROM users").fetchone()[0] == 0
    fresh = database.thread_connection()
    assert fresh is not conn
    create_user(fresh, "after")
    assert database.thread_connection() is fresh  # a healthy connection is kept


@SQLITE_ONLY
def test_a_connection_whose_write_was_refused_is_replaced_even_if_it_looked_writable(database: Database) -> None:
    require_fault_support()
    conn = database.thread_connection()
    with read_only(database_files(Path(database.path))):
        stuck = database.connect()  # opened read-only, as a thread would meanwhile
    stuck.opened_read_only = False  # as if the open had raced with the fault: only the refusal tells
    assert not stuck.stale(database.path)
    with pytest.raises(sqlite3.OperationalError):
        stuck.execute("INSERT INTO users(name, created_at) VALUES ('x', 'now')")
    assert stuck.stale(database.path) and not conn.stale(database.path)
    stuck.close()


@pytest.mark.parametrize(
    ("name", "fault"),
    [
        ("SQLITE_READONLY", True),
        ("SQLITE_FULL", True),
        ("SQLITE_BUSY", True),
        ("SQLITE_IOERR_WRITE", True),
        ("SQLITE_ERROR", False),
        ("", False),
    ],
)
def test_storage_faults_are_told_from_bugs(name: str, fault: bool) -> None:
    error = sqlite3.OperationalError("x")
    error.sqlite_errorname = name  # type: ignore[attr-defined]
    assert storage_fault(error) is fault


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


def fts_ids(conn: sqlite3.Connection, word: str) -> list[int]:
    """Ids of the messages the full-text index finds `word` in (FTS5 table, or tsvector column)."""
    if dialect_of(conn) == "postgresql":
        found = "SELECT id FROM chat_messages WHERE search_vector @@ plainto_tsquery('app_search', ?)"
    else:
        found = "SELECT rowid FROM chat_messages_fts WHERE chat_messages_fts MATCH ?"
    return sorted(row[0] for row in conn.execute(found, (word,)))


def test_deleting_a_session_cascades_to_messages_and_index(conn: sqlite3.Connection, alice: int) -> None:
    doomed = create_session(conn, alice)
    kept = create_session(conn, alice)
    gone = [
        add_message(conn, session_id=doomed.id, user_id=alice, role=role, content="zebra stripes").id
        for role in ("user", "web_search_tools", "assistant")
    ]
    stays = add_message(conn, session_id=kept.id, user_id=alice, role="user", content="zebra crossing").id
    assert fts_ids(conn, "zebra") == sorted([*gone, stays])

    assert delete_session(conn, alice, doomed.id)
    remaining = conn.execute("SELECT id FROM chat_messages").fetchall()
    assert [row[0] for row in remaining] == [stays]
    assert fts_ids(conn, "zebra") == [stays]
    assert fts_ids(conn, "stripes") == []
    if dialect_of(conn) == "sqlite":
        conn.execute("INSERT INTO chat_messages_fts(chat_messages_fts, rank) VALUES ('integrity-check', 1)")


def test_updating_a_message_reindexes_it(conn: sqlite3.Connection, alice: int) -> None:
    session = create_session(conn, alice)
    message = add_message(conn, session_id=session.id, user_id=alice, role="user", content="old words")
    conn.execute("UPDATE chat_messages SET content = 'new text' WHERE id = ?", (message.id,))
    assert fts_ids(conn, "old") == []
    assert fts_ids(conn, "new") == [message.id]


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
    assert len(fts_ids(conn, "m0")) == 8


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
