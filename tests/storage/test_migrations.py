"""The schema's one history (storage/migrations.py): each step on both engines, the same schema.

Every test runs on a blank database of each engine (`blank_store`, tests/pg_support.py): a
SQLite file and a PostgreSQL database of the private cluster.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage.connection import DbConnection, Migration, ScriptConnection, Store
from storage.db import Database
from storage.errors import StorageError
from storage.migrations import ENGINE_COLUMNS, M001_INITIAL, MIGRATIONS, execute_script
from storage.pg import PgDatabase

# What `_migrations` records for the steps already shipped: an existing database (SQLite file or
# PostgreSQL database) knows its steps by these names, so they never change.
SHIPPED = (
    "m001_initial",
    "m002_full_text_search",
    "m003_session_activity",
    "m004_activities_problems_submissions",
    "m005_learner_tasks",
    "m006_web_sessions",
    "m101_memory_sql_confinement",
    "m102_memory_sql_allow_list",
    "m103_message_tree",
    "m104_accounts",
    "m105_pinned_sessions",
    "m106_user_settings",
)
POSTGRESQL_ONLY = ("m101_memory_sql_confinement", "m102_memory_sql_allow_list")

# The app's tables and their columns, in order, after every step (both engines; the columns one
# engine adds are `storage.migrations.ENGINE_COLUMNS`).
TABLES: dict[str, list[str]] = {
    "_migrations": ["name", "applied_at"],
    "users": ["id", "name", "role", "profile", "created_at", "password_hash", "disabled_at"],
    "api_tokens": ["id", "user_id", "token_hash", "created_at", "label"],
    "sessions": ["id", "user_id", "name", "created_at", "updated_at"],
    "chat_messages": ["id", "session_id", "user_id", "role", "content", "meta", "created_at"],
    "user_memories": ["id", "user_id", "content", "importance", "created_at", "updated_at"],
    "activities": [
        "id",
        "user_id",
        "session_id",
        "topic",
        "language",
        "difficulty",
        "requested",
        "status",
        "created_at",
        "updated_at",
    ],
    "problems": [
        "id",
        "activity_id",
        "user_id",
        "language",
        "difficulty",
        "title",
        "statement",
        "starter_files",
        "reference_files",
        "tests",
        "position",
        "created_at",
    ],
    "submissions": ["id", "problem_id", "user_id", "language", "files", "status", "verdict", "created_at"],
    "task_projects": ["id", "title", "description", "source_hash", "created_at", "updated_at"],
    "tasks": [
        "pk",
        "project_id",
        "id",
        "title",
        "description",
        "task_type",
        "parent_id",
        "dependencies",
        "priority",
        "learning_objectives",
        "acceptance_criteria",
        "position",
        "content_hash",
        "retired",
        "created_at",
        "updated_at",
    ],
    "task_progress": ["learner_id", "task_pk", "status", "created_at", "updated_at"],
    "task_attempts": [
        "id",
        "learner_id",
        "task_pk",
        "attempt",
        "answer",
        "result",
        "checks",
        "reviewed_by",
        "review_note",
        "reviewed_at",
        "created_at",
    ],
    "task_comments": ["id", "task_pk", "learner_id", "author_id", "text", "created_at"],
    "task_events": [
        "id",
        "learner_id",
        "task_pk",
        "actor_id",
        "action",
        "from_status",
        "to_status",
        "reason",
        "created_at",
    ],
    "help_requests": ["id", "learner_id", "task_pk", "message", "status", "created_at", "resolved_by", "resolved_at"],
    "web_sessions": ["id_hash", "user_id", "token_id", "created_at", "expires_at"],
    "user_settings": ["user_id", "theme", "system_prompt", "approval", "updated_at"],
}
# Each engine's own index objects, read from its catalog besides the tables above.
SQLITE_INDEX_TABLES = {"chat_messages_fts", "user_memories_fts"}
INDEXES = {
    "messages_by_session",
    "messages_by_parent",
    "messages_by_user",
    "memories_by_user",
    "sessions_by_user",
    "web_sessions_by_token",
}
APPLIED_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def steps_for(dialect: str, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[str]:
    """The names an engine applies and records: the steps with something to do there."""
    return [m.name for m in migrations if getattr(m, dialect) is not None]


def app_tables(store: Store, conn: DbConnection) -> dict[str, list[str]]:
    """Tables and their columns in order, read from the engine's catalog (its index tables aside)."""
    if store.dialect == "postgresql":
        found: dict[str, list[str]] = {}
        for row in conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
            " ORDER BY table_name, ordinal_position"
        ):
            found.setdefault(row["table_name"], []).append(row["column_name"])
        return found
    names = [
        row[0]
        for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not row[0].startswith(("sqlite_", *SQLITE_INDEX_TABLES))
    ]
    return {name: [row["name"] for row in conn.execute(f"PRAGMA table_info({name})")] for name in names}


def index_names(store: Store, conn: DbConnection) -> set[str]:
    if store.dialect == "postgresql":
        return {row[0] for row in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('index', 'table')")}


# Columns later steps add (ALTER TABLE … ADD COLUMN), after the engine's own columns.
ADDED_LATER: dict[str, list[str]] = {
    "sessions": ["active_leaf_id", "pinned_at", "model"],  # m103_message_tree, m105_pinned_sessions, m106_user_settings
    "chat_messages": ["parent_id"],  # m103_message_tree
}


def expected_tables(dialect: str) -> dict[str, list[str]]:
    """TABLES' columns, an engine's own columns where that engine puts them: after the columns
    of the step that made the table (a later `ALTER TABLE … ADD COLUMN` comes after them)."""
    extra = ENGINE_COLUMNS[dialect]
    return {
        table: columns + list(extra.get(table, ())) + ADDED_LATER.get(table, []) for table, columns in TABLES.items()
    }


def test_the_shipped_steps_keep_their_names_and_order() -> None:
    """An existing database is recognised by the names its `_migrations` holds: a step is never
    renamed or moved, new ones are appended; each names its DDL for both engines."""
    names = [m.name for m in MIGRATIONS]
    assert tuple(names[: len(SHIPPED)]) == SHIPPED
    assert len(set(names)) == len(names)
    assert steps_for("postgresql") == names
    assert steps_for("sqlite") == [name for name in names if name not in POSTGRESQL_ONLY]
    assert all(m.sqlite is not None or m.name in POSTGRESQL_ONLY for m in MIGRATIONS)


def test_a_blank_database_gets_every_table_and_column(blank_store: Store) -> None:
    dialect = blank_store.dialect
    applied = blank_store.migrate()
    assert applied == steps_for(dialect)
    with blank_store.connection() as conn:
        assert app_tables(blank_store, conn) == expected_tables(dialect)
        assert index_names(blank_store, conn) >= INDEXES
        if dialect == "sqlite":
            assert index_names(blank_store, conn) >= SQLITE_INDEX_TABLES
        rows = conn.execute("SELECT name, applied_at FROM _migrations ORDER BY applied_at, name").fetchall()
        before = app_tables(blank_store, conn)
    assert sorted(row[0] for row in rows) == sorted(applied)
    assert all(APPLIED_AT.fullmatch(row[1]) for row in rows), rows
    assert blank_store.migrate() == []  # twice: nothing left to do, nothing changed
    with blank_store.connection() as conn:
        assert app_tables(blank_store, conn) == before
        assert conn.execute("SELECT name, applied_at FROM _migrations ORDER BY applied_at, name").fetchall() == rows


def test_both_engines_build_the_same_tables_and_columns(tmp_path: Path, pg_empty_url: str) -> None:
    """Same tables, same columns in the same order; an engine adds only its `ENGINE_COLUMNS`."""
    sqlite = Database(tmp_path / "schema.db")
    postgresql = PgDatabase(pg_empty_url, pool_size=2)
    try:
        found: dict[str, dict[str, list[str]]] = {}
        for store in (sqlite, postgresql):
            store.migrate()
            with store.connection() as conn:
                extra = ENGINE_COLUMNS[store.dialect]
                found[store.dialect] = {
                    table: [c for c in columns if c not in extra.get(table, ())]
                    for table, columns in app_tables(store, conn).items()
                }
    finally:
        postgresql.close()
    assert found["sqlite"] == found["postgresql"] == {t: c + ADDED_LATER.get(t, []) for t, c in TABLES.items()}


RACING_MIGRATOR = """
import os, sys, time
sys.path.insert(0, os.getcwd())
from config.database_url import DatabaseTarget
from storage.open import open_store
start = float(sys.argv[3])
while time.time() < start:  # every process leaves this line within a millisecond of the others
    pass
store = open_store(DatabaseTarget(sys.argv[1], sys.argv[2]), pool_size=1)
print(",".join(store.migrate()))
store.close()
"""
RACERS = {"sqlite": 6, "postgresql": 4}


@pytest.mark.parametrize("trial", range(3))
def test_processes_starting_at_once_on_a_blank_database_migrate_it_once(blank_store: Store, trial: int) -> None:
    """Real processes, released at the same instant on one blank database: before the runner
    re-read `_migrations` under the write lock (SQLite) or the advisory lock (PostgreSQL), about
    one in five died with "table ... already exists"."""
    dialect = blank_store.dialect
    location = blank_store.path or getattr(blank_store, "url", "")
    start = f"{time.time() + 1.5:.3f}"  # after the interpreters have started
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RACING_MIGRATOR, dialect, location, start],
            cwd=Path(__file__).parents[2],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(RACERS[dialect])
    ]
    outputs = [process.communicate(timeout=60) for process in processes]
    assert [(process.returncode, err[-300:]) for process, (_, err) in zip(processes, outputs, strict=True)] == [
        (0, "")
    ] * RACERS[dialect]
    applied = [name for out, _ in outputs for name in out.strip().split(",") if name]
    assert sorted(applied) == sorted(steps_for(dialect))  # each applied exactly once
    with blank_store.connection() as conn:
        assert sorted(row[0] for row in conn.execute("SELECT name FROM _migrations")) == sorted(steps_for(dialect))
        assert app_tables(blank_store, conn) == expected_tables(dialect)


def _broken_sqlite(conn: DbConnection) -> None:
    execute_script(conn, "CREATE TABLE half_done (id INTEGER PRIMARY KEY);\nINSERT INTO half_done VALUES (1);")
    conn.execute("ALTER TABLE users ADD COLUMN nickname TEXT")
    raise RuntimeError("boom")


def _broken_postgresql(conn: ScriptConnection) -> None:
    conn.script("CREATE TABLE half_done (id INTEGER PRIMARY KEY); INSERT INTO half_done VALUES (1);")
    conn.script("ALTER TABLE users ADD COLUMN nickname TEXT")
    raise RuntimeError("boom")


BROKEN = Migration(name="m002_broken", sqlite=_broken_sqlite, postgresql=_broken_postgresql)
FIXED = Migration(
    name="m002_broken",
    sqlite="CREATE TABLE half_done (id INTEGER PRIMARY KEY);",
    postgresql="CREATE TABLE half_done (id INTEGER PRIMARY KEY);",
)


def test_a_failing_step_leaves_nothing_behind(blank_store: Store) -> None:
    """Each step is one transaction: a step that fails half-way is not half-applied, and is
    applied once fixed (under the same name)."""
    with pytest.raises(RuntimeError, match="boom"):
        blank_store.migrate((M001_INITIAL, BROKEN))
    with blank_store.connection() as conn:
        assert not conn.in_transaction
        tables = app_tables(blank_store, conn)
        assert "half_done" not in tables
        assert "nickname" not in tables["users"]
        assert [row[0] for row in conn.execute("SELECT name FROM _migrations")] == ["m001_initial"]
    assert blank_store.migrate((M001_INITIAL, FIXED)) == ["m002_broken"]


def test_a_step_with_nothing_to_do_on_an_engine_is_not_recorded_there(blank_store: Store) -> None:
    other = "sqlite" if blank_store.dialect == "postgresql" else "postgresql"
    only_elsewhere = Migration(name="m900_elsewhere", **{blank_store.dialect: None, other: "SELECT 1"})  # type: ignore[arg-type]
    assert blank_store.migrate((M001_INITIAL, only_elsewhere)) == ["m001_initial"]
    with blank_store.connection() as conn:
        assert [row[0] for row in conn.execute("SELECT name FROM _migrations")] == ["m001_initial"]


def test_a_bad_step_is_a_storage_error_not_a_driver_error(blank_store: Store) -> None:
    bad = Migration(name="m900_bad", sqlite="CREATE TABLE users (x);", postgresql="CREATE TABLE users (x INTEGER);")
    with pytest.raises(StorageError) as raised:
        blank_store.migrate((M001_INITIAL, bad))
    assert "users" in str(raised.value) and raised.value.__cause__ is not None
